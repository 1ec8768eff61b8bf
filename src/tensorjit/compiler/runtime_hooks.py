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


def cudagraph_mark_warmup_incomplete() -> None:
    """Ask for another warm-up of the CUDA-graph function warming up now (called from inside its
    warm-up, by an autotuner say): this call runs eagerly and the next one warms up again instead
    of recording. Nothing outside a warm-up."""
    from ..runtime import cudagraphs
    cudagraphs.mark_warmup_incomplete()


def precompile(fn: Callable, *example_inputs, backend: str = "inductor", tracer: str = "make_fx",
               decompositions: dict | None = None):
    """Not available: torch 2.14's ahead-of-time precompile to a self-contained Python source."""
    raise NotImplementedError(
        "tensorjit.compiler.precompile: tensorjit does not precompile a function ahead of time into a "
        "Python source artifact; tensorjit.compile keeps compiled functions in its warm-start cache across "
        "processes, and save_cache_artifacts/load_cache_artifacts move that cache between machines")


class PrecompileError(RuntimeError):
    """torch.compiler.PrecompileError's name (torch 2.14); tensorjit's precompile raises
    NotImplementedError instead, so nothing raises this one."""


def set_enable_guard_collectives(enabled: bool) -> bool:
    """Accepted for torch.compiler's API; tensorjit runs no distributed guard collectives. Returns the old flag."""
    previous = _guard_collectives[0]
    _guard_collectives[0] = bool(enabled)
    return previous


def load_compiled_function(file, *, f_globals: dict | None = None, external_data: dict | None = None) -> Callable:
    """Not available: tensorjit does not serialise whole compiled functions (only kernels, see save_cache_artifacts)."""
    raise NotImplementedError("tensorjit.compiler.load_compiled_function: tensorjit cannot load a serialised "
                              "compiled function; use save_cache_artifacts/load_cache_artifacts to reuse kernels")
