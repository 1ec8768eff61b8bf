"""Triton emitter tests: on a machine without CUDA, kernels run in Triton's interpreter.

TRITON_INTERPRET=1 is set before any kernel is decorated (kernels are loaded
from generated source at test time), so @triton.jit functions become
interpreted ones that run on CPU tensors. With CUDA present the real compiler
runs and tests use CUDA tensors.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton")


@pytest.fixture
def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def cache_dir(tmp_path) -> str:
    return str(tmp_path)
