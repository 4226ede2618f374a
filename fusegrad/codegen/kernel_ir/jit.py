"""LLVM text to machine code in this process, with llvmlite (the LLVM inside Numba), and where a
NumPy array object keeps its data pointer, a tuple its items and a float its value, so a
compiled entry takes one tuple of the array objects (and floats) themselves.

Modules are kept in memory only: compiling is fast, and the engines live as long as the
process (the addresses they hand out must stay valid).
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

_LOCK = threading.Lock()
_ENGINES: list = []


def machine_code(text: str, names: list, opt: int = 0, fast_isel: bool = False) -> list:
    """The addresses of functions `names` of the LLVM module `text`, compiled in memory. At
    opt 0 for generic x86-64 without IR passes, instructions selected by FastISel if
    `fast_isel` (a third of SelectionDAG's time on loops with few calls), else SelectionDAG;
    above, for this CPU after LLVM's pipeline at that level with its loop vectorizer alone
    (no SLP vectorizer, unroller or interleaving: half the compile time of many short loops)."""
    import llvmlite.binding as llvm
    with _LOCK:
        if not _ENGINES:                  # the first compile in this process
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
        # The option is process-wide, so it is set under the lock for each compile; it only
        # decides level 0 (Numba's code is built at 3).
        llvm.set_option("", f"-fast-isel={'true' if fast_isel else 'false'}")
        target = llvm.Target.from_default_triple()
        if opt:
            machine = target.create_target_machine(
                cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                opt=opt)
        else:
            machine = target.create_target_machine(opt=0)
        module = llvm.parse_assembly(text)
        module.verify()
        if opt:
            tuning = llvm.PipelineTuningOptions(opt)
            tuning.loop_vectorization = True
            tuning.slp_vectorization = tuning.loop_unrolling = False
            tuning.loop_interleaving = False
            builder = llvm.create_pass_builder(machine, tuning)
            builder.getModulePassManager().run(module, builder)
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.finalize_object()
        _ENGINES.append(engine)
        return [engine.get_function_address(n) for n in names]


def _data_offset() -> int | None:
    """Where a NumPy array object keeps the address of its data (PyArrayObject's `data`, 16
    bytes in on 64-bit CPython), found by looking, so that the entry can take the array
    objects themselves: a call then passes their id()s, 15 times faster than asking each for
    its address. None if two probes disagree (then Numba compiles everything)."""
    found = set()
    for probe in (np.empty(3), np.zeros((2, 5))[1]):
        want = probe.ctypes.data
        found.add(next((offset for offset in range(8, 64, 8) if
                        ctypes.c_void_p.from_address(id(probe) + offset).value == want), None))
    return found.pop() if len(found) == 1 else None


def _items_offset() -> int | None:
    """Where a tuple object keeps its items (PyTupleObject's `ob_item`, 24 bytes in on 64-bit
    CPython), found by looking: the runner passes the entry one tuple of the array objects,
    whose item array is the table of arrays. None if the probe does not find it."""
    probe = (object(), object(), object())
    return next((offset for offset in range(8, 64, 8) if all(
        ctypes.c_void_p.from_address(id(probe) + offset + 8 * k).value == id(item)
        for k, item in enumerate(probe))), None)


def _float_offset() -> int | None:
    """Where a Python float keeps its value (PyFloatObject's `ob_fval`, 16 bytes in), found by
    looking: a float argument goes to the entry as the object itself. None if not found."""
    probe = float.fromhex("0x1.23456789abcdep+7")
    return next((offset for offset in range(8, 64, 8) if
                 ctypes.c_double.from_address(id(probe) + offset).value == probe), None)


DATA_OFFSET = _data_offset()
ITEMS_OFFSET = _items_offset()
FLOAT_OFFSET = _float_offset()
