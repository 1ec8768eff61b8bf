"""Session-wide test settings.

Without CUDA, Triton kernels run in Triton's interpreter on CPU tensors: the
variable must be set before any kernel is decorated, hence here, at collection.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
