"""Which Python functions capture refuses to look into.

Inlining reaches any Python function by default. Some cannot be traced
meaningfully (they do I/O, manage threads or inspect frames); calling one ends
the graph and runs it eagerly.

unittest is traced (its assertions are plain Python that compiled test bodies call), except
unittest.mock, whose patching rewrites modules and classes.
"""

from __future__ import annotations

from .breaks import GraphBreak
from .values.functions import FunctionValue

_SKIPPED_MODULE_PREFIXES = (
    "logging", "warnings", "threading", "inspect", "traceback", "abc", "typing", "contextlib",
    "importlib", "os", "io", "pdb", "unittest.mock", "numpy", "scipy", "tensorjit", "torch._dynamo",
    "torch.autograd", "torch.utils.hooks", "torch.utils.checkpoint", "torch.distributed", "copy",
    "torch.optim.lr_scheduler",  # as Dynamo (FORCE_SKIP_FILES): a scheduler's step is Python on floats, run eagerly
)

_INLINED_IN_SKIPPED_MODULES = {
    ("torch.optim.lr_scheduler",
     "LRScheduler.__init__.<locals>.patch_track_step_called.<locals>.wrap_step.<locals>.wrapper"),
}
"""(module, qualified name) of thin wrappers in a skipped module that are inlined: Dynamo skips the
wrapper's frame but its frame hook compiles the callee, which tensorjit (no frame hook) reaches only
by inlining. A scheduler wraps `optimizer.step` in this one; skipped, the update would run eagerly."""

_POLYFILLS = "tensorjit.capture.polyfills."

_disabled: dict = {}  # code object -> the reason given to disable(), or None


def mark_disabled(code, reason: str | None = None) -> None:
    _disabled[code] = reason


def check_inlinable(fn):
    """`fn` (a function value) when capture may inline it, or the function to inline in its place;
    raises GraphBreak when it must run eagerly."""
    code = fn.code
    if code in _disabled:
        reason = _disabled[code]
        raise GraphBreak("disabled", f"{code.co_name} is marked tensorjit.compiler.disable"
                         + (f" ({reason})" if reason else ""), "it runs eagerly")
    real = getattr(fn, "fn", None)
    if getattr(real, "_torchdynamo_disable", False) is True:  # torch.compiler.disable / torch._dynamo.disable
        original = _traced_by_dynamo_itself(real)
        if original is not None:
            return FunctionValue(original)
        reason = getattr(real, "_torchdynamo_disable_msg", None)
        name = getattr(getattr(real, "_torchdynamo_orig_callable", real), "__qualname__", code.co_name)
        raise GraphBreak("disabled", f"{name} is marked torch.compiler.disable"
                         + (f" ({reason})" if reason else ""), "it runs eagerly")
    module = (getattr(fn, "globals", None) or {}).get("__name__", "") or ""
    if module.startswith(_POLYFILLS):
        return fn  # Python stand-ins for C functions, written to be traced
    if is_skipped(module, code):
            raise GraphBreak("skipped-function", f"{code.co_name} in module {module} is not traced",
                             "it runs eagerly")
    return fn


def is_skipped(module: str, code) -> bool:
    """Whether a function of `module` with `code` runs eagerly instead of being inlined (or compiled
    when reached at a graph break)."""
    if (module, getattr(code, "co_qualname", code.co_name)) in _INLINED_IN_SKIPPED_MODULES:
        return False
    return any(module == prefix or module.startswith(prefix + ".") for prefix in _SKIPPED_MODULE_PREFIXES)


def _traced_by_dynamo_itself(marked):
    """The original of a function torch disables for Dynamo's frame hook only: importing
    torch._dynamo marks every optimizer's `_init_group` disabled, and Dynamo then runs it at
    trace time while tracing `step` (a break per step otherwise). tensorjit inlines it."""
    original = getattr(marked, "_torchdynamo_orig_callable", None)
    if getattr(original, "__name__", None) == "_init_group" and \
            (getattr(original, "__module__", "") or "").startswith("torch.optim."):
        return original
    return None
