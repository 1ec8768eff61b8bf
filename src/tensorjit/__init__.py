"""tensorjit: a just-in-time compiler for PyTorch programs.

    import tensorjit
    model = tensorjit.compile(model)      # or @tensorjit.compile on any function
"""

from . import backends, config, logs
from .backends import registry as _registry  # noqa: F401  (tensorjit.backends.registry)
from .api import OptimizedModule, compile, disable, reset
from .backends.registry import BackendCompilerFailed, BackendUnavailable, list_backends, register_backend
from .capture.breaks import CaptureError, GraphBreakError
from .explain import explain
from .report import report
from .runtime.cudagraphs import mark_step_begin as cudagraph_mark_step_begin
from . import compiler

__all__ = ["compile", "disable", "explain", "reset", "list_backends", "register_backend",
           "GraphBreakError", "CaptureError", "BackendCompilerFailed", "BackendUnavailable", "OptimizedModule",
           "config", "logs", "report", "compiler", "cudagraph_mark_step_begin"]
__version__ = "0.1.0"
