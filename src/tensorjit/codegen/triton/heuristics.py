"""Launch shapes for generated Triton kernels, chosen from the problem's sizes.

Takes element counts (and, for reductions, the row length and element width)
and returns `LaunchShape`s: block sizes, warps and the grid. Pure functions of
integers: no GPU is needed to decide, so the choices are unit-tested on CPU.

The rules, and why:
  * Pointwise: 1024 elements per program and 4 warps (8 per thread: two
    16-byte loads of float32, one of bfloat16); 8 warps for long fused chains.
  * Reductions whose row fits in registers are persistent: the whole row is
    loaded once, reduced, and the epilogue (softmax's exp and divide, layer
    norm's scale and shift) runs on the registers, so the row is read from
    memory once. Rows up to `PERSISTENT_LIMIT` elements qualify; warps grow
    with the row so that each thread holds at most ~16 elements.
  * Longer rows loop over the row in RBLOCK chunks; `looped_reduction_configs`
    lists the few shapes a small autotune tries.
  * mode="max-autotune" (Config.max_autotune): pointwise and persistent kernels
    too are timed on their first call among `pointwise_candidates` /
    `persistent_candidates` (the rule's choice first, then its neighbours).
"""

from __future__ import annotations

import dataclasses

PERSISTENT_LIMIT = 16384
"""Longest row reduced in registers in one pass (elements)."""
ELEMENTS_PER_THREAD = 32
"""A persistent row is spread so each thread keeps about this many values.
Measured on an H100 (bench/triton_kernels.py): softmax over 8192-long bf16 rows
is fastest at 8 warps (94.9% of copy bandwidth), layer norm + GELU over 4096 at
4 warps (69.6%); both are 32 values a thread."""
MAX_WARPS = 16
SMALL_ROW_TILE = 4096
"""Elements per program when several short rows share a program."""
MIN_PROGRAMS = 256
"""Programs a persistent reduction keeps when it stacks rows (about two per multiprocessor of
an H100): densenet121's batch norms over 128-512 channels of 4x4 to 8x8 pixels stacked 4-16
rows a program ran 8-32 programs (one took 0.21 ms of a 10 ms training step)."""


@dataclasses.dataclass(frozen=True, slots=True)
class LaunchShape:
    """How one kernel is launched: block sizes (constexprs), warps and grid."""

    xblock: int
    rblock: int | None
    num_warps: int
    grid: tuple[int, int, int]
    persistent: bool = False
    num_stages: int = 1
    programs: int | None = None
    """Set for a persistent grid: this many programs loop over the blocks (grid = (programs, 1, 1))."""

    def constants(self) -> dict[str, int]:
        values = {"XBLOCK": self.xblock}
        if self.rblock is not None:
            values["RBLOCK"] = self.rblock
        return values


def previous_power_of_2(value: int) -> int:
    return 1 if value <= 1 else 1 << (value.bit_length() - 1)


def next_power_of_2(value: int) -> int:
    return 1 if value <= 1 else 1 << (value - 1).bit_length()


def ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def pointwise_shape(numel: int, heavy: bool = False) -> LaunchShape:
    """`heavy`: many operations per element (a long fused chain); more warps
    then hide the arithmetic's latency (measured: a 50-op chain over 4M floats
    ran 0.052 ms at 1024/8 warps, 0.059 at 1024/4 and 2048/8)."""
    # Blocks shrink (down to 128 elements) before the grid falls below MIN_PROGRAMS: a long
    # chain over a small tensor (densenet121's backward sums 24 gradients of a 32K-element
    # slice) ran 0.058 ms on 32 programs.
    block = min(1024, next_power_of_2(max(numel, 1)), max(128, next_power_of_2(ceil_div(numel, MIN_PROGRAMS))))
    warps = max(1, min(8 if heavy else 4, block // 128))
    return LaunchShape(xblock=block, rblock=None, num_warps=warps, grid=(ceil_div(numel, block), 1, 1))


def is_persistent(row_length: int) -> bool:
    return row_length <= PERSISTENT_LIMIT


def persistent_reduction_shape(rows: int, row_length: int) -> LaunchShape:
    """One pass: RBLOCK covers the whole row; short rows are stacked XBLOCK to a program, as
    long as that leaves MIN_PROGRAMS programs."""
    rblock = next_power_of_2(max(row_length, 1))
    xblock = 1 if rblock >= SMALL_ROW_TILE else min(next_power_of_2(rows), SMALL_ROW_TILE // rblock)
    xblock = max(1, min(xblock, previous_power_of_2(rows // MIN_PROGRAMS)))
    # Few programs: more threads each, a quarter of the elements a thread (one warp walked a
    # 1024-element batch-norm row of 128 channels: 4.6 us a launch).
    per_thread = ELEMENTS_PER_THREAD if ceil_div(rows, xblock) >= 4 * MIN_PROGRAMS else ELEMENTS_PER_THREAD // 4
    threads_needed = max(32, (xblock * rblock) // per_thread)
    warps = max(1, min(MAX_WARPS, next_power_of_2(threads_needed // 32)))
    return LaunchShape(
        xblock=xblock, rblock=rblock, num_warps=warps, grid=(ceil_div(rows, xblock), 1, 1), persistent=True
    )


def looped_reduction_configs(rows: int, row_length: int) -> list[LaunchShape]:
    """The shapes a looped reduction's autotune tries, most likely best first."""
    configs = []
    for xblock, rblock, warps in ((1, 2048, 8), (1, 4096, 16), (1, 1024, 4), (8, 512, 8)):
        if xblock > 1 and rows < 1024:
            continue  # few rows: stacking them leaves the device idle
        configs.append(
            LaunchShape(xblock=xblock, rblock=rblock, num_warps=warps, grid=(ceil_div(rows, xblock), 1, 1))
        )
    return configs


def index_dtype(*extents: int) -> str:
    """int32 indexing while every offset fits (faster address arithmetic), else int64."""
    return "tl.int32" if max(extents, default=0) < 2**31 else "tl.int64"


def _distinct(shapes: list[LaunchShape]) -> list[LaunchShape]:
    return list(dict.fromkeys(shapes))


def pointwise_candidates(numel: int, heavy: bool = False) -> list[LaunchShape]:
    """max-autotune: the rule's shape, then blocks of 256-4096 elements at 2-16 warps."""
    shapes = [pointwise_shape(numel, heavy)]
    for block, warps in ((512, 4), (1024, 4), (1024, 8), (2048, 8), (4096, 16), (256, 2)):
        block = min(block, next_power_of_2(max(numel, 1)))
        warps = max(1, min(warps, block // 64))
        shapes.append(LaunchShape(xblock=block, rblock=None, num_warps=warps, grid=(ceil_div(numel, block), 1, 1)))
    return _distinct(shapes)


def persistent_candidates(rows: int, row_length: int) -> list[LaunchShape]:
    """max-autotune: the rule's shape, then half and twice its rows per program and warps."""
    chosen = persistent_reduction_shape(rows, row_length)
    shapes = [chosen]
    for xblock in (chosen.xblock // 2, chosen.xblock, chosen.xblock * 2):
        if xblock < 1 or xblock > next_power_of_2(rows) or xblock * chosen.rblock > 4 * SMALL_ROW_TILE:
            continue
        for warps in (chosen.num_warps // 2, chosen.num_warps, chosen.num_warps * 2):
            if 1 <= warps <= MAX_WARPS:
                shapes.append(dataclasses.replace(chosen, xblock=xblock, num_warps=warps,
                                                  grid=(ceil_div(rows, xblock), 1, 1)))
    return _distinct(shapes)
