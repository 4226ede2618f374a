"""Write the golden two-layer perceptron fixture with PyTorch (run once; the .npy files are
committed, and the test that reads them needs no torch).

    pip install torch==2.13.0 && python scripts/generate_golden.py

As the seed chapter's write_mlp_fixture: torch.manual_seed(20260), a 6x4 float64 input, a
5-unit tanh hidden layer, 3 classes, mean cross entropy; saves the inputs, targets, loss,
parameters and their gradients under tests/golden/mlp/.
"""

from __future__ import annotations

import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "golden", "mlp")


def main():
    torch.manual_seed(20260)
    x = torch.randn(6, 4, dtype=torch.float64)
    targets = torch.randint(0, 3, (6,))
    w1 = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    b1 = torch.randn(5, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    b2 = torch.randn(3, dtype=torch.float64, requires_grad=True)
    logits = torch.tanh(x @ w1 + b1) @ w2 + b2
    loss = torch.nn.functional.cross_entropy(logits, targets)
    loss.backward()
    os.makedirs(OUT, exist_ok=True)
    arrays = {"x": x, "targets": targets, "loss": loss, "w1": w1, "b1": b1, "w2": w2,
              "b2": b2, "grad_w1": w1.grad, "grad_b1": b1.grad, "grad_w2": w2.grad,
              "grad_b2": b2.grad}
    for name, t in arrays.items():
        np.save(os.path.join(OUT, f"{name}.npy"), t.detach().numpy())
    print(f"wrote {len(arrays)} arrays to {os.path.normpath(OUT)} (torch {torch.__version__}, "
          f"loss {loss.item():.17g})")


if __name__ == "__main__":
    main()
