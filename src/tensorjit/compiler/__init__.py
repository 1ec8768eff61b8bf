"""tensorjit.compiler: the torch.compiler API, with the same names and meanings.

Changing `torch.compile` to `tensorjit.compile` and `torch.compiler` to
`tensorjit.compiler` is all a program needs. docs/api.md lists each name and
how far it goes. The modules: `stance` (set_stance), `markers` (disable,
allow_in_graph, graph_break, ...), `guard_filters` (guard_filter_fn helpers),
`artifacts` (save/load_cache_artifacts), `options` (list_options),
`runtime_hooks` (cudagraph_mark_step_begin, ...), `dynamic_marks` (mark_dynamic, ...).
"""

from .. import config
from ..api import compile, reset
from ..backends.registry import get_default_backend, list_backends, set_default_backend
from .dynamic_marks import mark_dynamic, mark_static, mark_unbacked, maybe_mark_dynamic
from .artifacts import CacheInfo, load_cache_artifacts, save_cache_artifacts
from .guard_filters import (keep_portable_guards_unsafe, keep_tensor_guards_unsafe, skip_all_guards_unsafe,
                            skip_guard_on_all_nn_modules_unsafe, skip_guard_on_globals_unsafe,
                            skip_guard_on_inbuilt_nn_modules_unsafe)
from .markers import (allow_in_graph, assume_constant_result, disable, error_on_graph_break, graph_break,
                      is_compiling, is_dynamo_compiling, is_exporting, nested_compile_region, nonstrict_trace,
                      substitute_in_graph, wrap_numpy)
from .options import list_mode_options, list_options
from .runtime_hooks import (
    PrecompileError, cudagraph_mark_step_begin, cudagraph_mark_warmup_incomplete, load_compiled_function, precompile,
    set_enable_guard_collectives,
)
from .stance import set_stance

__all__ = [
    # torch.compiler.__all__ (torch 2.13 / 2.14), in its order
    "compile", "config", "assume_constant_result", "reset", "allow_in_graph", "substitute_in_graph",
    "list_backends", "disable", "set_default_backend", "get_default_backend", "set_stance",
    "set_enable_guard_collectives", "cudagraph_mark_step_begin", "cudagraph_mark_warmup_incomplete",
    "load_compiled_function", "precompile", "PrecompileError", "wrap_numpy",
    "is_compiling", "is_dynamo_compiling", "is_exporting", "save_cache_artifacts", "load_cache_artifacts",
    "keep_portable_guards_unsafe", "skip_guard_on_inbuilt_nn_modules_unsafe",
    "skip_guard_on_all_nn_modules_unsafe", "keep_tensor_guards_unsafe", "skip_guard_on_globals_unsafe",
    "skip_all_guards_unsafe", "nested_compile_region",
    # torch._dynamo / torch._inductor names a torch.compile user reaches for
    "graph_break", "error_on_graph_break", "nonstrict_trace", "list_options", "list_mode_options", "CacheInfo",
    "mark_dynamic", "maybe_mark_dynamic", "mark_static", "mark_unbacked",
]
