"""A Triton GEMM template: mm, addmm and bmm as tiled `tl.dot` kernels.

Takes a `GemmProblem` (the op, its sizes, every operand's strides, the dtype,
addmm's alpha and beta, whether float32 products may use TF32) and returns the
text of a module with one @triton.jit kernel (`gemm_source`), plus the launch
shapes worth timing for it (`gemm_candidates`). Sizes and strides are literals,
as in every generated kernel: a compiled graph has static shapes, and Triton
then proves alignment and contiguity itself (a weight read as W^T is simply
an operand whose stride along K is not 1). The block sizes, group size and
`EVEN_K` are constexpr parameters, so one source serves every configuration.

The kernel, per program: one BLOCK_M x BLOCK_N tile of the output (of one
batch entry, grid axis 1), programs ordered in groups of GROUP_M tile rows so
that neighbours share operand tiles in L2; a loop over K in BLOCK_K steps
accumulating `tl.dot` in float32 (pipelined `num_stages` deep); then
alpha * acc + beta * bias, rounded once to the output dtype on store, as
cuBLAS's epilogue does. Loads of rows past M (columns past N) wrap around
(`% M`) instead of being masked: their results are never stored.

Only mode="max-autotune" uses it (gemm_choice.py times it against cuBLAS).
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch

from . import expressions, interpreter_math
from .heuristics import ceil_div, next_power_of_2
from .kernels import PRELUDE

OPS = ("mm", "addmm", "bmm")
DTYPES = {torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16", torch.float32: "tl.float32"}


@dataclasses.dataclass(frozen=True, slots=True)
class GemmProblem:
    """One product: out[b] = alpha * a[b] @ b_[b] + beta * bias, every operand by its strides.

    Strides are (batch, rows, columns) for a, b and out (batch stride 0 for mm and addmm),
    (rows, columns) for the bias broadcast to (m, n) (0 along a broadcast dimension)."""

    op: str
    batch: int
    m: int
    n: int
    k: int
    dtype: torch.dtype
    a_strides: tuple[int, int, int]
    b_strides: tuple[int, int, int]
    out_strides: tuple[int, int, int]
    bias_strides: tuple[int, int] | None = None
    alpha: float = 1.0
    beta: float = 1.0
    tf32: bool = False
    """float32 only: tl.dot may round its inputs to TF32 (torch.backends.cuda.matmul.allow_tf32)."""

    @property
    def reads_bias(self) -> bool:
        # beta == 0: eager ignores the bias (NaN in it does not propagate)
        return self.bias_strides is not None and self.beta != 0

    def text(self) -> str:
        return (f"{self.op} {self.batch}x{self.m}x{self.n}x{self.k} {self.dtype} a{self.a_strides} "
                f"b{self.b_strides} out{self.out_strides} bias{self.bias_strides} alpha={self.alpha} "
                f"beta={self.beta} tf32={self.tf32}")


@dataclasses.dataclass(frozen=True, slots=True)
class GemmConfig:
    """One configuration of the template: tile sizes, group size, warps, pipeline stages."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int

    def __str__(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k} group {self.group_m}, "
                f"{self.num_warps} warps, {self.num_stages} stages")


@dataclasses.dataclass(frozen=True, slots=True)
class GemmShape:
    """A configuration applied to one problem: what `launcher.KernelLauncher` needs of a launch
    shape (constexpr values, warps, stages, grid)."""

    config: GemmConfig
    grid: tuple[int, int, int]
    even_k: bool

    @property
    def num_warps(self) -> int:
        return self.config.num_warps

    @property
    def num_stages(self) -> int:
        return self.config.num_stages

    def constants(self) -> dict[str, int]:
        c = self.config
        return {"BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "BLOCK_K": c.block_k, "GROUP_M": c.group_m,
                "EVEN_K": self.even_k}


HOPPER_CONFIGS = (
    GemmConfig(128, 128, 64, 8, 8, 3),
    GemmConfig(128, 256, 64, 8, 8, 3),
    GemmConfig(64, 128, 64, 8, 4, 4),
    GemmConfig(128, 64, 64, 8, 4, 4),
    GemmConfig(128, 128, 32, 8, 4, 4),
    GemmConfig(64, 64, 64, 8, 4, 3),
)
"""The configurations timed against cuBLAS (an H100's 228 KB of shared memory a multiprocessor,
4th-generation tensor cores that want 64-wide K tiles of 16-bit values): large tiles for large
products, 64-row tiles where a large tile would leave multiprocessors idle."""

SHARED_MEMORY_LIMIT = 200 * 1024
"""Bytes of operand tiles a configuration may keep in flight (stages x (A tile + B tile)); above
it Triton fails to compile for lack of shared memory (float32's 128x256x64 at 3 stages: 288 KB)."""
MIN_BLOCK = 16
"""tl.dot's smallest tile side."""


def shrink(config: GemmConfig, problem: GemmProblem) -> GemmConfig:
    """`config` with tiles no larger than the problem (rounded up to a power of two, at least 16):
    a 64-row product gains nothing from 128-row tiles but idle lanes."""
    def fit(block: int, size: int) -> int:
        return min(block, max(MIN_BLOCK, next_power_of_2(size)))
    return dataclasses.replace(config, block_m=fit(config.block_m, problem.m), block_n=fit(config.block_n, problem.n),
                               block_k=fit(config.block_k, problem.k))


def shared_memory(config: GemmConfig, dtype: torch.dtype) -> int:
    element = torch.tensor([], dtype=dtype).element_size()
    return config.num_stages * (config.block_m + config.block_n) * config.block_k * element


def launch_shape(config: GemmConfig, problem: GemmProblem) -> GemmShape:
    tiles = ceil_div(problem.m, config.block_m) * ceil_div(problem.n, config.block_n)
    return GemmShape(config, (tiles, problem.batch, 1), problem.k % config.block_k == 0)


def gemm_candidates(problem: GemmProblem, configs=HOPPER_CONFIGS) -> list[GemmShape]:
    """The distinct configurations, fitted to `problem`, that fit in shared memory."""
    fitted = dict.fromkeys(shrink(config, problem) for config in configs)
    return [launch_shape(c, problem) for c in fitted if shared_memory(c, problem.dtype) <= SHARED_MEMORY_LIMIT]


def kernel_name(problem: GemmProblem, epilogue_text: str = "") -> str:
    digest = hashlib.sha256((problem.text() + epilogue_text).encode()).hexdigest()[:12]
    return f"gemm_{problem.op}_{digest}"


def gemm_source(problem: GemmProblem, name: str | None = None,
                epilogue: tuple[list[str], list[str]] | None = None) -> str:
    """The module text of the template kernel for `problem`; its parameters are
    (a, b, [bias,] out) pointers, then the constexprs of `GemmShape.constants`.

    `epilogue`: (lines, pointer parameters) that replace the store: they read the float32
    tile `value` (and `rm`, `rn`, `batch`, `mask`) and store to `out` themselves
    (gemm_epilogue.py); their pointers come before `out`."""
    name = name or kernel_name(problem)
    extra = epilogue[1] if epilogue else []
    pointers = ["a", "b"] + (["bias"] if problem.reads_bias else []) + extra + ["out"]
    store = _store_lines(problem)
    if epilogue:
        store = store[:-1] + epilogue[0]
    body = _tile_lines(problem) + _loop_lines(problem) + store
    # The generated kernels' prelude: an epilogue's ops call libdevice and its helpers.
    prelude = PRELUDE + interpreter_math.PRELUDE if expressions.interpreted() else PRELUDE
    lines = "\n    ".join(body)
    return (f"{prelude}\n\n@triton.jit\ndef {name}({', '.join(pointers)}, BLOCK_M: tl.constexpr, "
            f"BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):\n"
            f"    {lines}\n")


def wide(problem: GemmProblem) -> bool:
    """Does an offset reach 2**31 (then indices are int64)?"""
    extents = [problem.batch * max(problem.a_strides[0], 1) + problem.m * problem.k,
               problem.batch * max(problem.b_strides[0], 1) + problem.k * problem.n,
               problem.batch * max(problem.out_strides[0], 1) + problem.m * problem.n]
    return max(extents) >= 2**31


def _tile_lines(problem: GemmProblem) -> list[str]:
    """Which output tile this program computes: grouped order, GROUP_M tile rows at a time."""
    m, n = problem.m, problem.n
    lines = [
        "pid = tl.program_id(0)",
        "batch = tl.program_id(1)",
        f"tiles_m = ({m} + BLOCK_M - 1) // BLOCK_M",
        f"tiles_n = ({n} + BLOCK_N - 1) // BLOCK_N",
        "width = GROUP_M * tiles_n",
        "first_m = (pid // width) * GROUP_M",
        "group_rows = tl.minimum(tiles_m - first_m, GROUP_M)",
        "tile_m = first_m + (pid % width) % group_rows",
        "tile_n = (pid % width) // group_rows",
        "rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "rk = tl.arange(0, BLOCK_K)",
    ]
    if wide(problem):
        lines += ["batch = batch.to(tl.int64)", "rm = rm.to(tl.int64)", "rn = rn.to(tl.int64)",
                  "rk = rk.to(tl.int64)"]
    return lines


def _loop_lines(problem: GemmProblem) -> list[str]:
    ab, am, ak = problem.a_strides
    bb, bk, bn = problem.b_strides
    precision = ""
    if problem.dtype == torch.float32:
        precision = f", input_precision={'tf32' if problem.tf32 else 'ieee'!r}"
    # The interpreter's dot misreads bfloat16 tiles (numpy has no bfloat16): float32 there,
    # which is exact for bfloat16 inputs.
    widen = ".to(tl.float32)" if problem.dtype == torch.bfloat16 and expressions.interpreted() else ""
    return [
        f"a_pointers = a + batch * {ab} + (rm % {problem.m})[:, None] * {am} + rk[None, :] * {ak}",
        f"b_pointers = b + batch * {bb} + rk[:, None] * {bk} + (rn % {problem.n})[None, :] * {bn}",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        f"for k in range(0, {problem.k}, BLOCK_K):",
        "    if EVEN_K:",
        "        a_tile = tl.load(a_pointers)",
        "        b_tile = tl.load(b_pointers)",
        "    else:",
        f"        a_tile = tl.load(a_pointers, mask=rk[None, :] < {problem.k} - k, other=0.0)",
        f"        b_tile = tl.load(b_pointers, mask=rk[:, None] < {problem.k} - k, other=0.0)",
        f"    acc += tl.dot(a_tile{widen}, b_tile{widen}{precision})",
        f"    a_pointers += BLOCK_K * {ak}",
        f"    b_pointers += BLOCK_K * {bk}",
    ]


def _store_lines(problem: GemmProblem) -> list[str]:
    """alpha * acc + beta * bias in float32, rounded once on store."""
    ob, om, on = problem.out_strides
    lines = ["mask = (rm < %d)[:, None] & (rn < %d)[None, :]" % (problem.m, problem.n), "value = acc"]
    if problem.alpha != 1:
        lines.append(f"value = value * {float(problem.alpha)!r}")
    if problem.reads_bias:
        sm, sn = problem.bias_strides
        lines.append(f"bias_value = tl.load(bias + rm[:, None] * {sm} + rn[None, :] * {sn}, mask=mask)"
                     ".to(tl.float32)")
        lines.append("value = value + bias_value" if problem.beta == 1 else
                     f"value = value + bias_value * {float(problem.beta)!r}")
    stored = expressions.cast("value", problem.dtype)
    lines.append(f"tl.store(out + batch * {ob} + rm[:, None] * {om} + rn[None, :] * {on}, {stored}, mask=mask)")
    return lines
