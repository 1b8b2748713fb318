"""torch_ext_tiny: ``scaled_add(a, b, alpha)`` = a + alpha * b, computed by a compiled kernel
(the operator ``torch.ops.torch_ext_tiny.scaled_add``)."""

from pathlib import Path

import torch

torch.ops.load_library(str(next(Path(__file__).parent.glob("_C*.so"))))

scaled_add = torch.ops.torch_ext_tiny.scaled_add
cuda_built = torch.ops.torch_ext_tiny.cuda_built

__all__ = ["cuda_built", "scaled_add"]
