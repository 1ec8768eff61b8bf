"""Which Python functions capture refuses to look into.

Inlining reaches any Python function by default. Some cannot be traced
meaningfully (they do I/O, manage threads or inspect frames); calling one ends
the graph and runs it eagerly.
"""

from __future__ import annotations

from .breaks import GraphBreak

_SKIPPED_MODULE_PREFIXES = (
    "logging", "warnings", "threading", "inspect", "traceback", "abc", "typing", "contextlib",
    "importlib", "os", "io", "pdb", "unittest", "numpy", "scipy", "tensorjit", "torch._dynamo",
    "torch.autograd", "torch.utils.hooks", "torch.utils.checkpoint", "torch.distributed", "copy",
)

_POLYFILLS = "tensorjit.capture.polyfills."

_disabled: set = set()


def mark_disabled(code) -> None:
    _disabled.add(code)


def check_inlinable(fn) -> None:
    code = fn.code
    if code in _disabled:
        raise GraphBreak("disabled", f"{code.co_name} is marked tensorjit.disable")
    module = (getattr(fn, "globals", None) or {}).get("__name__", "") or ""
    if module.startswith(_POLYFILLS):
        return  # Python stand-ins for C functions, written to be traced
    for prefix in _SKIPPED_MODULE_PREFIXES:
        if module == prefix or module.startswith(prefix + "."):
            raise GraphBreak("skipped-function", f"{code.co_name} in module {module} is not traced",
                             "it runs eagerly")
