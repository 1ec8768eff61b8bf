"""max-autotune's matrix products: cuBLAS or a Triton GEMM template, timed per problem.

`choose_gemms(program, cache_dir)` takes a scheduled `ir.Program` and returns it with every
CUDA `mm`, `addmm` and `bmm` Extern whose operands the template serves (float16, bfloat16,
float32; any strides) calling a `GemmChoice` instead of the ATen op. A `GemmChoice` is a
callable with the op's signature and schema (memory planning and the wrapper treat it as
the op): on its first call it times the ATen op (cuBLAS) and each configuration of the
template (`gemm_template.gemm_candidates`) on the call's real operands, keeps the fastest,
and logs the choice (TENSORJIT_LOGS=autotuning). The choice is written beside the
template's source in the disk cache (one file per device name, as `AutotunedLauncher`
does), so a later process reads it instead of timing again. `gemm_epilogue.attach_epilogues`
then merges a product with its one pointwise reader where it can; that step's `GemmChoice`
also times the template with the reader in its store.

Correctness does not depend on the choice: every candidate computes the same product. The
template is not used (the ATen op runs) where its assumptions fail at run time: a float32
product whose TF32 setting changed since it was compiled, or a first call inside CUDA graph
capture (nothing can be timed there; the next call outside a capture chooses).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from ... import logs
from .. import ir
from ..values import IR_TO_TORCH
from . import expressions
from .gemm_epilogue import attach_epilogues
from .gemm_template import GemmProblem, GemmShape, gemm_candidates, gemm_source, kernel_name, wide
from .launcher import AutotunedLauncher, KernelLauncher, load_kernel_file, source_path
from .parallel import CompileJob

aten = torch.ops.aten
OPS = {aten.mm.default: "mm", aten.addmm.default: "addmm", aten.bmm.default: "bmm"}
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
WARMUPS = 2
REPEATS = 10
ROUNDS = 3
EXTERN = "extern"
FUSED = " + epilogue"


def choose_gemms(program: ir.Program, cache_dir: str | None = None) -> ir.Program:
    """`program` with each product the template serves calling a `GemmChoice`; see the module docstring."""
    buffers = {b.name: b for b in program.buffers}
    steps = []
    for step in program.steps:
        problem = problem_of(step, buffers) if isinstance(step, ir.Extern) else None
        if problem is not None:
            output = buffers[step.output]
            step = dataclasses.replace(step, target=GemmChoice(step.target, problem, output.shape, output.strides,
                                                               cache_dir))
        steps.append(step)
    return attach_epilogues(dataclasses.replace(program, steps=tuple(steps)))


def problem_of(step: ir.Extern, buffers: dict[str, ir.Buffer]) -> GemmProblem | None:
    """The template's description of the product `step`, or None where the template does not serve it."""
    op = OPS.get(step.target)
    if op is None or not all(isinstance(a, ir.BufferRef) for a in step.args):
        return None
    operands = [buffers[a.name] for a in step.args]
    output = buffers[step.output]
    dtype = IR_TO_TORCH.get(output.dtype)
    if dtype not in DTYPES or any(IR_TO_TORCH.get(o.dtype) != dtype for o in operands):
        return None
    kwargs = dict(step.kwargs)
    alpha, beta = kwargs.pop("alpha", 1), kwargs.pop("beta", 1)
    if kwargs or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                         for v in (alpha, beta)):
        return None
    bias, a, b = (operands[0], *operands[1:]) if op == "addmm" else (None, *operands)
    if len(output.shape) != (3 if op == "bmm" else 2) or 0 in output.shape or 0 in a.shape[-1:]:
        return None
    batched = op == "bmm"
    m, k = a.shape[-2:]
    n = b.shape[-1]
    bias_strides = None
    if bias is not None:
        bias_strides = broadcast_strides(bias, (m, n))
        if bias_strides is None:
            return None
    tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return GemmProblem(op, output.shape[0] if batched else 1, m, n, k, dtype, _batched(a, batched),
                       _batched(b, batched), _batched(output, batched), bias_strides, alpha, beta, tf32)


def _batched(buffer: ir.Buffer, batched: bool) -> tuple[int, int, int]:
    return tuple(buffer.strides) if batched else (0, *buffer.strides)


def broadcast_strides(buffer: ir.Buffer, shape: tuple[int, int]) -> tuple[int, int] | None:
    """The strides that read `buffer` broadcast to `shape` (0 along broadcast dimensions)."""
    if len(buffer.shape) > 2:
        return None
    strides = []
    for position in (-2, -1):
        if len(buffer.shape) < -position or buffer.shape[position] == 1:
            strides.append(0)
        elif buffer.shape[position] == shape[position]:
            strides.append(buffer.strides[position])
        else:
            return None
    return tuple(strides)


def can_time() -> bool:
    """Can candidates be timed here (a GPU, not the interpreter)?"""
    return torch.cuda.is_available() and not expressions.interpreted()


def capturing() -> bool:
    """Is the current stream recording a CUDA graph?"""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def measure_ms(function: Callable[[], Any]) -> float:
    """Milliseconds one call of `function` takes on the GPU: the least of ROUNDS batches of REPEATS."""
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(ROUNDS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPEATS):
            function()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / REPEATS)
    return best


def _on_kernel_device(args) -> bool:
    """Are the operands where template kernels run (CUDA; CPU tensors under the interpreter)?"""
    return expressions.interpreted() or all(a.is_cuda for a in args if isinstance(a, torch.Tensor))


def device_name() -> str:
    return "".join(c if c.isalnum() else "_" for c in torch.cuda.get_device_name())


class GemmChoice:
    """Stands for one matrix product's ATen op under max-autotune; see the module docstring.

    With an `epilogue` (gemm_epilogue.py) it stands for the product and the pointwise kernel
    reading it: called with the op's arguments and then the epilogue's other inputs, it returns
    the epilogue's output, and the template with the epilogue in its store is timed too."""

    fresh_contiguous = True  # every candidate returns a new tensor of the traced layout

    def __init__(self, op, problem: GemmProblem, shape: tuple[int, ...], strides: tuple[int, ...],
                 cache_dir: str | None = None):
        self.op = op
        self._schema = op._schema  # memory planning reads aliasing from it: a fresh output, no mutation
        self.__name__ = f"{OPS[op]}_autotuned"
        self.problem = problem
        self.arity = 3 if problem.op == "addmm" else 2  # the op's own positional arguments
        self.shape, self.strides = tuple(shape), tuple(strides)
        self.cache_dir = cache_dir
        self.shapes: list[GemmShape] = gemm_candidates(problem)
        self.epilogue = None  # gemm_epilogue.Epilogue, set by attach_epilogues
        self.path: str | None = None
        self.launchers: list[KernelLauncher] | None = None
        self.fused_path: str | None = None
        self.fused_launchers: list[KernelLauncher] | None = None
        self.separate: Any = None  # the epilogue's own kernel launcher
        self.chosen: str | None = None  # EXTERN, str(config) or str(config) + FUSED
        self.timings_ms: dict[str, float] = {}
        self._call: Callable[..., Any] = self._first_call

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    # -- the kernels -------------------------------------------------------------------------
    def load(self) -> list[KernelLauncher]:
        """The template's launchers, one per configuration (its source written to the cache)."""
        if self.launchers is None:
            name = kernel_name(self.problem)
            self.path = source_path(gemm_source(self.problem, name), self.cache_dir)
            function = load_kernel_file(self.path, name)
            self.launchers = [KernelLauncher(function, shape) for shape in self.shapes]
        return self.launchers

    def load_fused(self) -> list[KernelLauncher]:
        """The launchers of the template with the epilogue in its store."""
        if self.fused_launchers is None:
            from .gemm_epilogue import epilogue_text, fused_lines

            name = kernel_name(self.problem, epilogue_text(self.epilogue))
            extents = [ir.extent(b) for b in self.epilogue.buffers.values()]
            lines = fused_lines(self.epilogue, self.problem, wide(self.problem) or max(extents) >= 2**31)
            self.fused_path = source_path(gemm_source(self.problem, name, lines), self.cache_dir)
            function = load_kernel_file(self.fused_path, name)
            self.fused_launchers = [KernelLauncher(function, shape) for shape in self.shapes]
        return self.fused_launchers

    def load_separate(self):
        """The epilogue's own kernel (what runs after the product when it is not fused)."""
        if self.separate is None:
            kernel = self.epilogue.separate
            path = source_path(kernel.source, self.cache_dir)
            function = load_kernel_file(path, kernel.name)
            candidates = [KernelLauncher(function, shape) for shape in kernel.shapes]
            self.separate = candidates[0] if len(candidates) == 1 else AutotunedLauncher(candidates, choice_path=path)
        return self.separate

    # -- the candidates ----------------------------------------------------------------------
    def template(self, index: int) -> Callable[..., torch.Tensor]:
        """The product through configuration `index`: (a, b) or (bias, a, b) -> a new product."""
        launcher = self.load()[index]
        shape, strides, dtype, op = self.shape, self.strides, self.problem.dtype, self.op
        checks_tf32 = dtype == torch.float32
        tf32, reads_bias = self.problem.tf32, self.problem.reads_bias
        matmul = torch.backends.cuda.matmul

        def run(*args, **kwargs):
            if checks_tf32 and matmul.allow_tf32 != tf32:
                return op(*args, **kwargs)  # compiled for the other precision: cuBLAS follows the flag
            out = torch.empty_strided(shape, strides, dtype=dtype, device=args[-1].device)
            if len(args) == 3:
                bias, a, b = args
                launcher(a, b, bias, out) if reads_bias else launcher(a, b, out)
            else:
                launcher(args[0], args[1], out)
            return out
        return run

    def then_epilogue(self, product: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        """`product` on the op's arguments, then the epilogue's own kernel on it and the rest."""
        launcher, arity, epilogue = self.load_separate(), self.arity, self.epilogue
        output = epilogue.output
        shape, strides, dtype = output.shape, output.strides, IR_TO_TORCH[output.dtype]
        where = {epilogue.product.name: -1, output.name: -2}
        where.update((name, arity + i) for i, name in enumerate(epilogue.inputs))
        order = [where[name] for name in epilogue.separate.arguments]

        def run(*args, **kwargs):
            values = list(args) + [None, None]  # [-2]: the output, [-1]: the product
            values[-1] = product(*args[:arity], **kwargs)
            values[-2] = out = torch.empty_strided(shape, strides, dtype=dtype, device=values[-1].device)
            launcher(*[values[i] for i in order])
            return out
        return run

    def fused(self, index: int) -> Callable[..., torch.Tensor]:
        """Configuration `index` with the epilogue in its store: one kernel, no product in memory."""
        launcher, arity = self.load_fused()[index], self.arity
        output = self.epilogue.output
        shape, strides, dtype = output.shape, output.strides, IR_TO_TORCH[output.dtype]
        checks_tf32 = self.problem.dtype == torch.float32
        tf32, reads_bias = self.problem.tf32, self.problem.reads_bias
        matmul = torch.backends.cuda.matmul
        unfused = self.then_epilogue(self.op)

        def run(*args, **kwargs):
            if checks_tf32 and matmul.allow_tf32 != tf32:
                return unfused(*args, **kwargs)
            out = torch.empty_strided(shape, strides, dtype=dtype, device=args[arity - 1].device)
            operands = (args[1], args[2], args[0]) if reads_bias else args[arity - 2:arity]
            launcher(*operands, *args[arity:], out)
            return out
        return run

    def candidate(self, name: str) -> Callable[..., Any]:
        """One way to compute the step: EXTERN (the ATen op), a configuration's name (the template),
        or that name + FUSED (the template with the epilogue in its store)."""
        wrap = self.then_epilogue if self.epilogue is not None else (lambda product: product)
        if name == EXTERN:
            return wrap(self.op)
        configs = [str(shape.config) for shape in self.shapes]
        if name.endswith(FUSED):
            return self.fused(configs.index(name[:-len(FUSED)]))
        return wrap(self.template(configs.index(name)))

    def candidates(self) -> dict[str, Callable[..., Any]]:
        """Every way to compute the step, by name: the ATen op first."""
        return {name: self.candidate(name) for name in self._candidates_text()}

    def compile_jobs(self) -> list[CompileJob]:
        """Every configuration's compilation, for `parallel.compile_in_parallel` at build time; none
        where nothing will be timed (no GPU, or a choice already on disk)."""
        if not can_time() or not self.shapes or self._remembered() is not None:
            return []
        self.load()
        dtype = self.problem.dtype
        pointers = (dtype,) * (4 if self.problem.reads_bias else 3)
        jobs = [CompileJob(self.path, kernel_name(self.problem), pointers, tuple(shape.constants().items()),
                           shape.num_warps, shape.num_stages) for shape in self.shapes]
        if self.epilogue is not None:
            from .gemm_epilogue import epilogue_text

            self.load_fused()
            epilogue = self.epilogue
            inputs = tuple(IR_TO_TORCH[epilogue.buffers[n].dtype] for n in epilogue.inputs)
            fused = pointers[:-1] + inputs + (IR_TO_TORCH[epilogue.output.dtype],)
            name = kernel_name(self.problem, epilogue_text(epilogue))
            jobs += [CompileJob(self.fused_path, name, fused, tuple(shape.constants().items()), shape.num_warps,
                                shape.num_stages) for shape in self.shapes]
        return jobs

    # -- choosing ----------------------------------------------------------------------------
    def _first_call(self, *args, **kwargs):
        if not can_time() or not self.shapes or not _on_kernel_device(args):
            self._choose(EXTERN, "nothing to time here" if self.shapes else "no template configuration fits")
        elif capturing():
            return self.candidate(EXTERN)(*args, **kwargs)  # nothing can be timed in a capture: choose later
        else:
            remembered = self._remembered()
            if remembered is not None:
                self._choose(remembered, "remembered")
            else:
                self._choose(self._timed(args, kwargs), "timed")
                self._remember()
        return self._call(*args, **kwargs)

    def _timed(self, args, kwargs) -> str:
        usable = {}
        for name, function in self.candidates().items():
            try:
                for _ in range(WARMUPS):
                    function(*args, **kwargs)  # compiles (a template) and warms up outside the timing
                usable[name] = function
            except Exception as error:  # noqa: BLE001 - a configuration that fails to compile is not a candidate
                logs.emit("autotuning", f"{self.problem.text()}: {name} left out: {type(error).__name__}: {error}")
        for name, function in usable.items():
            self.timings_ms[name] = self._measure(name, lambda: function(*args, **kwargs))
        return min(self.timings_ms, key=self.timings_ms.get)

    def _measure(self, name: str, call: Callable[[], Any]) -> float:
        return measure_ms(call)

    def _choose(self, name: str, how: str) -> None:
        self.chosen = name
        self._call = self.op if name == EXTERN and self.epilogue is None else self.candidate(name)
        timings = ", ".join(f"{n} {ms:.4f} ms" for n, ms in sorted(self.timings_ms.items(), key=lambda i: i[1]))
        logs.emit("autotuning", f"{self.problem.text()}: {name} ({how}{': ' + timings if timings else ''})")

    # -- the record on disk ------------------------------------------------------------------
    def _record_file(self) -> str:
        path = self.load_fused() and self.fused_path if self.epilogue is not None else self.load() and self.path
        return f"{path}.{device_name()}.gemm-choice"

    def _candidates_text(self) -> list[str]:
        configs = [str(shape.config) for shape in self.shapes]
        return [EXTERN] + configs + ([c + FUSED for c in configs] if self.epilogue is not None else [])

    def _remembered(self) -> str | None:
        from tensorjit.runtime.disk_cache import is_owned_file

        path = self._record_file()
        if not is_owned_file(Path(path)):
            return None
        try:
            with open(path) as handle:
                record = json.load(handle)
            if record["candidates"] != self._candidates_text() or record["choice"] not in record["candidates"]:
                return None
            self.timings_ms = dict(record["timings_ms"])
            return record["choice"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _remember(self) -> None:
        path = self._record_file()
        record = {"choice": self.chosen, "timings_ms": self.timings_ms, "candidates": self._candidates_text(),
                  "problem": self.problem.text()}
        try:
            with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(path), delete=False, suffix=".tmp") as handle:
                json.dump(record, handle)
            os.replace(handle.name, path)
        except OSError:  # an unwritable cache: time again next process
            pass
