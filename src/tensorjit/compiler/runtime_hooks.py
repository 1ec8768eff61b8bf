"""Small runtime switches of torch.compiler: CUDA-graph step marks, guard collectives."""

from __future__ import annotations

from typing import Callable

_guard_collectives = [False]


def cudagraph_mark_step_begin() -> None:
    """Tell CUDA-graph replay that a new iteration starts (outputs of the last one may be overwritten)."""
    from ..runtime import cudagraphs
    mark = getattr(cudagraphs, "mark_step_begin", None)
    if mark is not None:
        mark()


def set_enable_guard_collectives(enabled: bool) -> bool:
    """Accepted for torch.compiler's API; tensorjit runs no distributed guard collectives. Returns the old flag."""
    previous = _guard_collectives[0]
    _guard_collectives[0] = bool(enabled)
    return previous


def load_compiled_function(file, *, f_globals: dict | None = None, external_data: dict | None = None) -> Callable:
    """Not available: tensorjit does not serialise whole compiled functions (only kernels, see save_cache_artifacts)."""
    raise NotImplementedError("tensorjit.compiler.load_compiled_function: tensorjit cannot load a serialised "
                              "compiled function; use save_cache_artifacts/load_cache_artifacts to reuse kernels")
