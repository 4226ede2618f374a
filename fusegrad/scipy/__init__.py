"""fusegrad's implementations of SciPy's public functions, for tensors and tracers (issue 14).

Each module of this package (special.py, stats.py, signal.py, linalg.py) ends with `HANDLED`, a
dict from a SciPy function's public dotted name ("scipy.special.logsumexp") to fusegrad's
implementation. SciPy does not dispatch through __array_function__, so the hook that routes a
user's call to these is installed here (see `scipy_functions`).
"""

from __future__ import annotations
