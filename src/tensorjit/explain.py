"""tensorjit.explain(fn)(*args, **kwargs): what capture did with one call, without keeping it."""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .capture.breaks import BreakReason


@dataclass
class ExplainOutput:
    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    graph_count: int = 0
    graph_break_count: int = 0
    break_reasons: list[BreakReason] = field(default_factory=list)
    op_count: int = 0
    ops_per_graph: list[list[str]] = field(default_factory=list)
    compile_times: list[float] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}", "Break Reasons:"]
        for i, reason in enumerate(self.break_reasons, 1):
            lines.append(f"  Break Reason {i}:")
            lines.append(f"    Reason: {reason.reason}")
            for loc in reason.user_stack:
                lines.append(f"    User Stack: {loc}")
        lines.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            lines.append(f"  Ops {i}:")
            lines += [f"    {op}" for op in ops]
        return "\n".join(lines)


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return f"Tensor.{target}" if node.op == "call_method" else target
    module = getattr(target, "__module__", "") or ""
    return f"{module}.{getattr(target, '__name__', repr(target))}".lstrip(".")


def _original(fn: Callable) -> Callable:
    """The user's function or module behind a `tensorjit.compile` result.

    explain() captures with its own recording backend; handed an already-compiled
    function, it must capture the original, not call the compiled one (whose cache
    would answer without capturing, and explain would report no graphs)."""
    from .api import CompiledFunction, OptimizedModule

    if isinstance(fn, OptimizedModule):
        return fn._orig_mod
    if isinstance(fn, CompiledFunction):
        return fn.fn
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, CompiledFunction):
        return types.MethodType(fn.__func__.fn, fn.__self__)
    return fn


def explain(fn: Callable, *extra_args, **extra_kwargs) -> Callable[..., ExplainOutput]:
    """Capture `fn` for one call with a recording backend and report graphs and breaks."""
    from .api import compile

    fn = _original(fn)

    def run(*args, **kwargs) -> ExplainOutput:
        out = ExplainOutput()

        def record(gm, example_inputs):
            out.graphs.append(gm)
            ops = [_op_name(n) for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
            out.ops_per_graph.append(ops)
            return gm.forward

        compiled = compile(fn, backend=record)
        seen = set()
        compiled(*args, **kwargs)
        root = compiled._compiled_forward if hasattr(compiled, "_compiled_forward") else \
            getattr(compiled, "__func__", compiled)
        for _, entry in root.all_entries():
            if entry.break_reason is not None and id(entry) not in seen:
                seen.add(id(entry))
                out.break_reasons.append(entry.break_reason)
        out.graph_count = len(out.graphs)
        out.graph_break_count = len(out.break_reasons)
        out.op_count = sum(len(o) for o in out.ops_per_graph)
        return out

    if extra_args or extra_kwargs:
        return run(*extra_args, **extra_kwargs)
    return run
