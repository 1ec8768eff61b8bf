"""The shared pipeline with the Triton emitter: ATen graph -> ir.Program -> Triton kernels -> wrapper.

`compile_graph(gm, example_inputs, config)` takes an ATen graph traced with
`codegen.decomp.decompositions()` (the C++ path's table) and returns a callable
with its signature, through the shared pipeline (codegen/pipeline.py) with
`TritonEmitter`:

    prepare_graph: move_scalar_constants  0-dim CPU constants meeting only CUDA tensors moved there
                   pad_matmuls        misaligned CUDA matrix products padded (pad_matmul.py)
                   prefer_channels_last  convolutions read NHWC (layout.py); kernels store in memory order
    GraphLowering(half_floats=True)   one @lowering registry (lowering*.py)
    -> schedule.fuse_loops            one scheduler (row groups)
    -> prepare: split_row_groups     few long rows: split reductions, then pointwise kernels (split_row_groups.py)
               split_column_reductions  few-output column sums in two kernels (split_reductions.py)
               prepare_groups        row-local scratch Triton can keep in registers
               choose_gemms          max-autotune: each mm/addmm/bmm times cuBLAS against Triton
                                     GEMM templates on its first call (gemm_choice.py, gemm_template.py)
               join_row_groups       a recomputation joins the row group reading its input (row_joins.py)
               gather_small_kernels  pointwise kernels of a few elements in one kernel (small_kernels.py)
               fuse_horizontally     pointwise kernels reading one input in one kernel (horizontal.py)
               fuse_column_sums      a column reduction in the kernel producing what it sums (fused_column_sums.py)
               sink_to_first_use     a kernel moves down to its first reader where nothing lives longer (sink_to_use.py)
    -> build: kernels.emit_kernel     TritonOps per kernel, launch shapes from heuristics;
              launcher / parallel     load, precompile in worker processes, fast launches
    -> wrapper.build_runner           the shared per-call wrapper, with `TritonLaunch`

Under TRITON_INTERPRET=1 it runs on CPU tensors, which is how tests cover it.
"""

from __future__ import annotations

from typing import Any

import torch

from ... import logs
from .. import ir, pipeline
from ..graph import GraphLowering
from ..pooling import values_only_max_pools
from ..memory import in_place_pairs, read_in_place
from ..report import timed
from ..schedule import fuse_loops
from ..values import IR_TO_TORCH
from .expressions import interpreted
from .gemm_choice import GemmChoice, choose_gemms
from .kernels import KernelText, emit_kernel, prepare_groups
from .launcher import AutotunedLauncher, KernelLauncher, load_kernel_file, source_path
from .layout import prefer_channels_last
from ..scalar_constants import move_scalar_constants
from .pad_matmul import pad_matmuls
from .split_reductions import split_column_reductions
from .split_row_groups import split_row_groups
from .horizontal import fuse_horizontally
from .row_joins import join_row_groups
from .fused_column_sums import fuse_column_sums
from .small_kernels import gather_small_kernels
from .sink_to_use import sink_to_first_use
from .parallel import CompileJob, compile_in_parallel


class TritonLaunch:
    """The wrapper's device hook for Triton kernels (see wrapper.CppLaunch)."""

    writes_in_place = True  # a kernel may write over what it reads (memory.reuses; build reads it so)

    def __init__(self, launchers: dict[str, Any], kernels: dict[str, KernelText], device: torch.device):
        self.launchers = launchers
        self.kernels = kernels
        # The device kernels were specialised for (the interpreter runs on CPU tensors).
        self.device_test = "is_cpu" if device.type == "cpu" else f"get_device() == {device.index or 0}"
        self.device = None if device.type == "cpu" else device

    def statement(self, source, step, written: list[str]) -> str:
        kernel = self.kernels[step.name]
        if kernel.shapes[0].grid[0] == 0:
            return "pass  # no rows"
        launcher = self.launchers[step.name]
        name = source.constant(launcher, "launch")
        entry = f"{name}.launch" if isinstance(launcher, KernelLauncher) else name
        return f"{entry}({', '.join(kernel.arguments)})"


def graph_device(example_inputs) -> torch.device:
    devices = {t.device for t in example_inputs if isinstance(t, torch.Tensor)}
    return devices.pop() if len(devices) == 1 else torch.device("cpu")


SHARED_OPS = 48
"""What the GPU recomputes per element rather than store and load (GraphLowering's sharing
budget, for values read element for element): an H100 does ~20 float32 operations in the time
one byte moves, so GELU's tanh (about 30 operations with the transcendental) is recomputed in
the forward's recomputation and in its backward instead of stored as a float32 tensor between
them (12 layers of GPT-2 small: 50 MB written and read per layer)."""

class TritonEmitter:
    """The Triton emitter's part of the shared pipeline (codegen/pipeline.py)."""

    half_floats = True  # loaded as float32, computed in float32, rounded on store
    shared_ops = SHARED_OPS
    masked_selects = True  # guards.py

    def __init__(self, device: torch.device, config=None):
        self.device = device
        self.config = config

    def prepare_graph(self, gm, example_inputs) -> None:
        move_scalar_constants(gm, self.device)  # 0-dim CPU constants read by kernels (scalar_constants.py)
        pad_matmuls(gm)  # CUDA products whose sizes cuBLAS handles slowly (pad_matmul.py); in place
        values_only_max_pools(gm, example_inputs)  # no int64 indices nothing reads (pooling.py)
        prefer_channels_last(gm, example_inputs)  # cuDNN's tensor-core convolutions run NHWC (layout.py)

    def prepare(self, program: ir.Program) -> ir.Program:
        program = prepare_groups(split_column_reductions(split_row_groups(program)))
        if getattr(self.config, "max_autotune", False) and (self.device.type == "cuda" or interpreted()):
            # Before horizontal fusion: a product's epilogue is its one pointwise reader, alone.
            program = choose_gemms(program, getattr(self.config, "cache_dir", None))  # cuBLAS or a template
        return sink_to_first_use(fuse_column_sums(fuse_horizontally(gather_small_kernels(join_row_groups(program)))))

    def build(self, name: str, program: ir.Program, config) -> TritonLaunch:
        buffers = {b.name: b for b in program.buffers}
        in_place = in_place_pairs(program)  # read through the output's pointer (wrapper: one tensor)
        with timed(name, "emit"):
            autotune = getattr(config, "max_autotune", False)
            kernels = {step.name: emit_kernel(read_in_place(step, in_place), buffers, autotune)
                       for step in program.steps if isinstance(step, (ir.Pointwise, ir.Reduction, ir.LoopGroup))}
        logs.output_code(name, "Triton (loop IR)", "\n\n".join(kernel.source for kernel in kernels.values()))
        cache_dir = getattr(config, "cache_dir", None)
        launchers, by_name, jobs = {}, {}, []
        for step_name, kernel in kernels.items():
            dtypes = tuple(IR_TO_TORCH[buffers[b].dtype] for b in kernel.arguments)
            # Equal kernels with equal argument types (one per layer) share a launcher; a launcher
            # binds the binary Triton specialised for its first call's types.
            if (kernel.name, dtypes) not in by_name:
                path = source_path(kernel.source, cache_dir)
                function = load_kernel_file(path, kernel.name)
                candidates = [KernelLauncher(function, shape) for shape in kernel.shapes]
                # A kernel writing over what it reads is timed on copies of those tensors.
                overwritten = tuple(i for i, b in enumerate(kernel.arguments) if b in in_place)
                by_name[kernel.name, dtypes] = candidates[0] if len(candidates) == 1 else \
                    AutotunedLauncher(candidates, choice_path=path, overwritten=overwritten)
                jobs += [CompileJob(path, kernel.name, dtypes, tuple(shape.constants().items()), shape.num_warps,
                                    shape.num_stages) for shape in kernel.shapes]
            launchers[step_name] = by_name[kernel.name, dtypes]
        if not interpreted():
            with timed(name, "triton_compile"):
                compile_in_parallel(jobs, getattr(config, "compile_threads", 0))
                compile_templates(program, getattr(config, "compile_threads", 0))
        return TritonLaunch(launchers, kernels, self.device)


def compile_templates(program: ir.Program, workers: int) -> None:
    """max-autotune: every GEMM template configuration a product will time, compiled in worker
    processes now. A configuration that fails to compile only leaves the timing's candidates
    (GemmChoice leaves it out, with a log line): the graph's own kernels are compiled by then."""
    jobs = [job for step in program.steps if isinstance(getattr(step, "target", None), GemmChoice)
            for job in step.target.compile_jobs()]
    try:
        compile_in_parallel(jobs, workers)
    except Exception as error:  # noqa: BLE001 - see the docstring
        logs.emit("autotuning", f"compiling GEMM templates ahead: {type(error).__name__}: {error}")


def lower(gm, example_inputs) -> tuple[ir.Program, GraphLowering]:
    """The program the pipeline would emit for `gm` (for tests and debugging)."""
    lowered = GraphLowering(gm, example_inputs, half_floats=True, device=graph_device(example_inputs),
                            shared_ops=SHARED_OPS, masked_selects=True)
    program = prepare_groups(fuse_loops(lowered.run()))
    return fuse_column_sums(fuse_horizontally(gather_small_kernels(join_row_groups(program)))), lowered


def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any], config=None):
    runner = pipeline.compile_graph(gm, example_inputs, config, TritonEmitter(graph_device(example_inputs), config))
    runner.kernel_sources = [kernel.source for kernel in runner.hook.kernels.values()]
    return runner
