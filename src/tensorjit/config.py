"""One typed configuration for the whole compiler.

Every option lives in `Config`, documented where it is declared. Modes are
named sets of options (`MODES`). Environment variables are read here and
nowhere else (`from_environment`).

The active configuration is passed down the pipeline as an argument; the
module-level `config` is only the default that `tensorjit.compile` starts from
and that users may edit (`tensorjit.config.config.cache_size_limit = 16`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
import typing
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Config:
    # -- capture -------------------------------------------------------------
    cache_size_limit: int = 8
    """Compiled entries kept per code object; past it the code runs eagerly."""
    inline_depth_limit: int = 64
    """Deepest chain of inlined user calls before capture gives up (graph break)."""
    capture_scalar_outputs: bool = False
    """Trace `.item()` into the graph instead of breaking there."""
    trace_numpy_random: bool = False
    """Trace numpy.random's module functions (randn, rand, normal, ...) into the graph, drawing from
    torch's generator through torch._numpy.random, as torch.compile does by default
    (torch._dynamo.config.use_numpy_random_stream=False): the numbers then differ from the ones
    NumPy's own stream would give eagerly. Off, a draw runs eagerly from NumPy's stream (a break)."""
    suppress_errors: bool = False
    """On an internal capture error, warn and run eagerly instead of raising."""
    guard_filter_fn: Callable | None = None
    """Unsafe: called with each new entry's guards (GuardEntry records), returns one keep flag per guard
    (tensorjit.compiler.skip_guard_on_globals_unsafe and the like, or torch.compiler's)."""

    # -- autograd ------------------------------------------------------------
    partitioner: str = "min_cut"
    """How the joint graph is split: "min_cut" (recompute cheap ops) or "save_all"."""
    reuse_repeated_blocks: bool = True
    """Trace an inference graph's repeated blocks (transformer layers) once and stamp the copies
    (autograd/segments.py): the same ATen graph, a fraction of the tracing. Off, every node is traced."""

    # -- code generation -----------------------------------------------------
    cpp_compiler: str | None = None
    """C++ compiler for CPU kernels; None searches PATH for g++, then clang++, then c++."""
    cache_dir: str | None = None
    """Where compiled kernels are cached; None means ~/.cache/tensorjit (mode 0700)."""
    warm_start: bool = True
    """Save compiled entries (guards, generated code, kernels) in the cache directory, so that a later
    process runs them without capturing, tracing or generating code again (runtime/warm_start.py).
    TENSORJIT_WARM_START=0 turns it off."""
    native_guards: bool = True
    """Check the tensors of an entry in one C++ call instead of five Python getters each
    (capture/native_guards.py); the extension is built once per machine with `cpp_compiler`, in the
    background, when an entry with 64 or more tensor guards is captured or a smaller one is called
    1000 times. Without a compiler the guards stay Python. TENSORJIT_NATIVE_GUARDS=0 turns it off."""
    compile_threads: int = 0
    """Worker processes that compile kernels in parallel; 0 picks from the CPU count."""
    max_autotune: bool = False
    """Time several launch shapes (block sizes, warps) of every generated Triton kernel on its
    first call and keep the fastest (`codegen/triton/heuristics.py` *_candidates); without it
    only looped reductions are timed. Matrix products (mm, addmm, bmm) choose on their first call
    between cuBLAS and Triton GEMM templates, with their pointwise consumer fused into the
    template's store where that is faster (`codegen/triton/gemm_choice.py`); every choice is kept
    on disk. mode="max-autotune" and "max-autotune-no-cudagraphs" set it."""
    triton_cudagraphs: bool = False
    """Replay compiled graphs through CUDA graphs (mode="reduce-overhead"): inference graphs, and the
    forward and backward graphs of training; see runtime/cudagraphs.py."""
    cudagraph_max_shapes: int = 8
    """Distinct input shapes recorded per compiled graph; calls with further shapes run without CUDA graphs."""
    cudagraph_max_recordings_per_shape: int = 2
    """Recordings of one input shape whose parameters or saved activations moved; further ones run without."""
    cudagraph_warmup_calls: int = 1
    """Calls before recording, in the recording's pool (lazy initialisation and autotuning stay out of
    the graph). One, as torch.compile's: each further call's outputs live while the next runs, and
    the pool keeps that peak (GPT-2 training, H100: 2054 MB reserved with one, 2530 with two)."""
    progress: str = "auto"
    """A live progress line on stderr for compiles over 2 s: "auto" (when stderr is a terminal),
    "always" or "never" (`tensorjit.progress`)."""
    profile_kernels: bool = False
    """Name every generated kernel and extern call in torch.profiler traces (costs ~1 us a step)."""
    verify_ir: bool = False
    """Check every lowered program with the IR verifier (codegen/verify.py) before emitting it:
    an IRError instead of a kernel that reads out of bounds. The test suite turns it on
    (TENSORJIT_VERIFY_IR=1); it costs milliseconds per graph."""

    @property
    def recompile_limit(self) -> int:
        """torch._dynamo.config's name for cache_size_limit (the same value)."""
        return self.cache_size_limit

    @recompile_limit.setter
    def recompile_limit(self, value: int) -> None:
        self.cache_size_limit = value

    def replace(self, **changes: Any) -> "Config":
        """Return a copy with `changes` applied; unknown names and wrong types raise, listing the valid ones."""
        check_options(changes)
        changed = dataclasses.replace(self, **changes)
        check_options(dataclasses.asdict(changed), "tensorjit.config.config")  # edits made by assignment
        return changed


CHOICES: dict[str, tuple[str, ...]] = {"partitioner": ("min_cut", "save_all"), "progress": ("auto", "always", "never")}
"""Options whose value is one of a few names."""
COUNTS = ("cache_size_limit", "inline_depth_limit", "compile_threads")
"""Options that count something: 0 or more."""


def option_names() -> list[str]:
    return [f.name for f in dataclasses.fields(Config)]


@functools.lru_cache(maxsize=1)
def option_types() -> dict[str, Any]:
    """Each option's declared type (the annotations are strings under `from __future__ import annotations`)."""
    hints = typing.get_type_hints(Config)
    return {name: hints[name] for name in option_names()}


def describe_options() -> str:
    """"name (type), ..." for error messages."""
    return ", ".join(f"{name} ({_type_name(kind)})" for name, kind in sorted(option_types().items()))


def _type_name(kind: Any) -> str:
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(k) for k in typing.get_args(kind))
    return "None" if kind is type(None) else kind.__name__


def _has_type(value: Any, kind: Any) -> bool:
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(_has_type(value, k) for k in typing.get_args(kind))
    if kind is int:  # True is an int to isinstance, not to a reader of options={"cache_size_limit": True}
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def check_options(options: Any, where: str = "options") -> None:
    """Raise, naming the option and listing the valid ones with their types, unless `options`
    is a dict of known option names to values of their declared types (and choices)."""
    if not isinstance(options, dict):
        raise TypeError(f"tensorjit: options must be a dict of option name -> value, got "
                        f"{type(options).__name__} {options!r:.80}; valid options are: {describe_options()}")
    check_option_names(options)
    for name, value in options.items():
        kind = option_types()[name]
        if not _has_type(value, kind):
            raise TypeError(f"tensorjit: {where}[{name!r}] must be {_type_name(kind)}, got "
                            f"{type(value).__name__} {value!r:.80}; valid options are: {describe_options()}")
        if name in COUNTS and value < 0:
            raise ValueError(f"tensorjit: {where}[{name!r}] must be 0 or more, got {value!r}")
        if name in CHOICES and value not in CHOICES[name]:
            raise ValueError(f"tensorjit: {where}[{name!r}] must be one of "
                             f"{', '.join(map(repr, CHOICES[name]))}, got {value!r}")


def check_option_names(options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - set(option_names()), key=repr)
    if unknown:
        raise ValueError(
            f"tensorjit: unknown option(s) {', '.join(map(repr, unknown))}; "
            f"valid options are: {describe_options()}"
        )


MODES: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"triton_cudagraphs": True},
    "max-autotune": {"max_autotune": True, "triton_cudagraphs": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True},
}


def from_environment(environ: os._Environ | dict[str, str] = os.environ) -> Config:
    """The default configuration, with TENSORJIT_* variables applied."""
    cfg = Config()
    if "TENSORJIT_CACHE_SIZE_LIMIT" in environ:
        text = environ["TENSORJIT_CACHE_SIZE_LIMIT"]
        try:
            cfg.cache_size_limit = int(text)
        except ValueError:
            raise ValueError(f"tensorjit: TENSORJIT_CACHE_SIZE_LIMIT must be an integer, got {text!r}") from None
    if "TENSORJIT_CACHE_DIR" in environ:
        cfg.cache_dir = environ["TENSORJIT_CACHE_DIR"]
    if environ.get("TENSORJIT_WARM_START", "") in ("0", "false", "False"):
        cfg.warm_start = False
    if environ.get("TENSORJIT_NATIVE_GUARDS", "") in ("0", "false", "False"):
        cfg.native_guards = False
    if "TENSORJIT_CXX" in environ:
        cfg.cpp_compiler = environ["TENSORJIT_CXX"]
    if "TENSORJIT_PROGRESS" in environ:
        if environ["TENSORJIT_PROGRESS"] in CHOICES["progress"]:
            cfg.progress = environ["TENSORJIT_PROGRESS"]
        else:  # as an unknown TENSORJIT_LOGS kind: named and ignored, so importing tensorjit still works
            warnings.warn(f"tensorjit: ignoring TENSORJIT_PROGRESS={environ['TENSORJIT_PROGRESS']!r}; valid values "
                          f"are: {', '.join(CHOICES['progress'])}", RuntimeWarning)
    if environ.get("TENSORJIT_PROFILE_KERNELS", "") not in ("", "0"):
        cfg.profile_kernels = True
    if environ.get("TENSORJIT_VERIFY_IR", "") not in ("", "0"):
        cfg.verify_ir = True
    return cfg


def log_settings_from_environment(environ: os._Environ | dict[str, str] = os.environ) -> str:
    """The raw TENSORJIT_LOGS value (parsed by `tensorjit.logs`)."""
    return environ.get("TENSORJIT_LOGS", "")


def report_directory_from_environment(environ: os._Environ | dict[str, str] = os.environ) -> str | None:
    """TENSORJIT_REPORT: a directory where an HTML report is written at exit (`tensorjit.report`)."""
    return environ.get("TENSORJIT_REPORT") or None


config: Config = from_environment()
