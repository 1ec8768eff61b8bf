"""The conformance programs again, compiled with backend="inductor" (generated kernels:
C++ on CPU, Triton on CUDA) instead of "eager": outputs, gradients, mutations and side
effects must still match eager PyTorch.

Tests that name their own backend (graph counting, backend contract) keep it.
"""

import os

import pytest

from . import harness
from .test_models import *  # noqa: F401,F403
from .test_python_features import *  # noqa: F401,F403
from .test_seeds import *  # noqa: F401,F403
from .test_side_effects import *  # noqa: F401,F403
from .test_training import *  # noqa: F401,F403


@pytest.fixture(autouse=True)
def _inductor_by_default(monkeypatch):
    harness.require_backend("inductor")
    monkeypatch.setattr(harness, "DEFAULT_BACKEND", os.environ.get("TJ_TEST_BACKEND", "inductor"))


test_autograd_grad_inside_compiled_function = pytest.mark.xfail(  # noqa: F405
    strict=True, reason="double backward through a compiled autograd graph is an error "
    "(once_differentiable, as in torch.compile); create_graph=True gets gradients that do not "
    "require grad")(test_autograd_grad_inside_compiled_function)  # noqa: F405
