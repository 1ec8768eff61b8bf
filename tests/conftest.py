"""Session-wide test settings.

The suite uses a temporary kernel cache (TENSORJIT_CACHE_DIR), removed at exit.
Without CUDA, Triton kernels run in Triton's interpreter on CPU tensors: the
variable must be set before any kernel is decorated, hence here, at collection.
"""

import atexit
import os
import shutil
import tempfile

import torch

# Kernels the tests compile go to a cache of this session's own, removed at exit, not
# into the user's ~/.cache/tensorjit (the suite writes hundreds of libraries). Set
# before tensorjit is imported: its configuration reads the variable once.
if "TENSORJIT_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="tensorjit-tests-")
    os.environ["TENSORJIT_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

# Every program the suite lowers goes through the IR verifier (codegen/verify.py).
os.environ.setdefault("TENSORJIT_VERIFY_IR", "1")

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
