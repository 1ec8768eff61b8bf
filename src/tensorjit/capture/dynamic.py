"""Dynamic shapes: symbolic sizes for chosen tensor dimensions, and the guards they need.

With `dynamic=True` every dimension of size >= 2 of a tensor argument is symbolic;
with `dynamic=None` (the default) a dimension becomes symbolic after a recompile
that was caused by it changing ("automatic dynamic", as torch.compile does: a
graph for [8], then one for [s0]). Parameters and buffers stay static. Sizes 0
and 1 are always specialized.

Symbolic sizes come from torch's `ShapeEnv`: each dynamic dimension gets a
symbol, fake tensors carry SymInt sizes, and `produce_guards` turns what capture
assumed about the symbols into guard expressions over our sources.
"""

from __future__ import annotations

import dataclasses

import torch
from torch._guards import GuardSource, Source as TorchSource

from .sources import Source

# torch.fx.experimental.symbolic_shapes imports sympy (half a second): imported when a capture
# first needs a shape environment, so that a process whose entries come from the warm-start cache
# never pays for it.


@dataclasses.dataclass(frozen=True)
class ExpressionSource(TorchSource):
    """One of our sources, in the form torch's ShapeEnv names sources in guard text."""

    expression: str

    @property
    def name(self) -> str:  # a property on torch's Source
        return self.expression

    def reconstruct(self, codegen):  # pragma: no cover - only Dynamo calls this
        raise NotImplementedError

    def guard_source(self):
        return GuardSource.LOCAL


@dataclasses.dataclass(frozen=True, slots=True)
class SizeSource(Source):
    """`of.size(dim)`: a symbolic size passed to the graph as an int input."""

    of: Source
    dim: int

    def expression(self) -> str:
        return f"{self.of.expression()}.size({self.dim})"

    def base(self) -> Source:
        return self.of


class DynamicPolicy:
    """Which dimensions of a tensor input, and which int arguments, are symbolic in this capture.

    An int argument is symbolic with dynamic=True, or with dynamic=None once a recompile
    was caused by its value changing (as torch.compile does: `f(x, 2)` then `f(x, 3)` gives
    a graph for 2 and one for any n). 0 and 1 stay specialized, and ints read from
    attributes or globals are constants, as are the values a resume function receives
    (the results of the Python that ran at a break: symbolic, they would turn int-only
    code after the break into graphs of its own)."""

    def __init__(self, dynamic: bool | None, history: dict[str, set[int]],
                 ints: set[str] | None = None) -> None:
        self.dynamic = dynamic
        self.history = history  # source expression -> dims seen changing
        self.ints = ints  # int arguments seen changing; None: no int is symbolic (a resume function)

    def int_symbolic(self, source: Source, value) -> bool:
        from .sources import LocalSource
        if self.ints is None or type(value) is not int or value in (0, 1) or not isinstance(source, LocalSource):
            return False
        return self.dynamic is True or (self.dynamic is None and source.expression() in self.ints)

    def dims(self, source: Source, tensor: torch.Tensor) -> list[int]:
        if self.dynamic is False or isinstance(tensor, torch.nn.Parameter):
            return []
        if self.dynamic is True:
            candidates = range(tensor.dim())
        else:
            candidates = self.history.get(source.expression(), ())
        return [d for d in candidates if d < tensor.dim() and tensor.shape[d] >= 2]

    def any_possible(self) -> bool:
        return self.dynamic is True or (self.dynamic is None and (any(self.history.values()) or bool(self.ints)))


def new_shape_env() -> "ShapeEnv":
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    return ShapeEnv()


def symbolic_context(tensor: torch.Tensor, dims: list[int]) -> "StatelessSymbolicContext":
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext
    sizes = [DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC for d in range(tensor.dim())]
    return StatelessSymbolicContext(dynamic_sizes=sizes)


def shape_guards(shape_env: "ShapeEnv", fakes: list, sources: list[Source]) -> list[str]:
    """Guard expressions (Python text over L, G, ...) that keep the symbolic graph valid."""
    if not fakes:
        return []
    # ignore_static=False: sizes that were specialized (range(n), a branch on n) and the
    # static sizes of tensors with some dynamic ones need their guards too.
    return list(shape_env.produce_guards(fakes, [ExpressionSource(s.expression()) for s in sources],
                                         ignore_static=False))


def symbolic_int(shape_env: "ShapeEnv", value: int, source: Source) -> torch.SymInt:
    from torch.fx.experimental.symbolic_shapes import DimDynamic
    """A SymInt standing for the int argument read through `source` (hint: `value`)."""
    named = ExpressionSource(source.expression())
    symbol = shape_env.create_symbol(value, named, dynamic_dim=DimDynamic.DYNAMIC, positive=None)
    return shape_env.create_symintnode(symbol, hint=value, source=named)


def record_changed_dims(history: dict[str, set[int]], source: str, before: tuple, after: tuple) -> None:
    if len(before) != len(after):
        return
    changed = {d for d, (a, b) in enumerate(zip(before, after)) if a != b}
    if changed:
        history.setdefault(source, set()).update(changed)
