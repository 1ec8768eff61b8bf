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
import os
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Config:
    # -- capture -------------------------------------------------------------
    cache_size_limit: int = 8
    """Compiled entries kept per code object; past it the code runs eagerly."""
    inline_depth_limit: int = 64
    """Deepest chain of inlined user calls before capture gives up (graph break)."""
    capture_scalar_outputs: bool = False
    """Trace `.item()` into the graph instead of breaking there."""
    suppress_errors: bool = False
    """On an internal capture error, warn and run eagerly instead of raising."""

    # -- autograd ------------------------------------------------------------
    partitioner: str = "min_cut"
    """How the joint graph is split: "min_cut" (recompute cheap ops) or "save_all"."""

    # -- code generation -----------------------------------------------------
    cpp_compiler: str | None = None
    """C++ compiler for CPU kernels; None searches PATH for g++, then clang++, then c++."""
    cache_dir: str | None = None
    """Where compiled kernels are cached; None means ~/.cache/tensorjit (mode 0700)."""
    compile_threads: int = 0
    """Worker processes that compile kernels in parallel; 0 picks from the CPU count."""
    max_autotune: bool = False
    """Benchmark several kernel configurations and keep the fastest."""
    triton_cudagraphs: bool = False
    """Replay compiled graphs through CUDA graphs (mode="reduce-overhead"): inference graphs, and the
    forward and backward graphs of training; see runtime/cudagraphs.py."""
    cudagraph_max_shapes: int = 8
    """Distinct input shapes recorded per compiled graph; calls with further shapes run without CUDA graphs."""
    cudagraph_max_recordings_per_shape: int = 2
    """Recordings of one input shape whose parameters or saved activations moved; further ones run without."""
    cudagraph_warmup_calls: int = 2
    """Calls on a side stream before recording (lazy initialisation and autotuning stay out of the graph)."""
    fallback_random: bool = False
    """Run random ops through ATen so compiled random numbers match eager bit for bit."""
    profile_kernels: bool = False
    """Name every generated kernel and extern call in torch.profiler traces (costs ~1 us a step)."""

    def replace(self, **changes: Any) -> "Config":
        """Return a copy with `changes` applied; unknown names raise, listing the valid ones."""
        check_option_names(changes)
        return dataclasses.replace(self, **changes)


def option_names() -> list[str]:
    return [f.name for f in dataclasses.fields(Config)]


def check_option_names(options: dict[str, Any]) -> None:
    valid = set(option_names())
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ValueError(
            f"tensorjit: unknown option(s) {', '.join(map(repr, unknown))}; "
            f"valid options are: {', '.join(sorted(valid))}"
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
        cfg.cache_size_limit = int(environ["TENSORJIT_CACHE_SIZE_LIMIT"])
    if "TENSORJIT_CACHE_DIR" in environ:
        cfg.cache_dir = environ["TENSORJIT_CACHE_DIR"]
    if "TENSORJIT_CXX" in environ:
        cfg.cpp_compiler = environ["TENSORJIT_CXX"]
    if environ.get("TENSORJIT_PROFILE_KERNELS", "") not in ("", "0"):
        cfg.profile_kernels = True
    return cfg


def log_settings_from_environment(environ: os._Environ | dict[str, str] = os.environ) -> str:
    """The raw TENSORJIT_LOGS value (parsed by `tensorjit.logs`)."""
    return environ.get("TENSORJIT_LOGS", "")


config: Config = from_environment()
