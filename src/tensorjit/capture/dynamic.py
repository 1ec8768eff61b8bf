"""Dynamic shapes: symbolic sizes for chosen tensor dimensions, and the guards they need.

With `dynamic=True` every dimension of size >= 2 of a tensor argument is symbolic;
with `dynamic=None` (the default) a dimension becomes symbolic after a recompile
that was caused by it changing ("automatic dynamic", as torch.compile does: a
graph for [8], then one for [s0]). Parameters and buffers stay static. Sizes 0
and 1 are always specialized.

Marks on a tensor override that, whatever `dynamic` says, with the attributes and
precedence torch's own markers use (so tensors marked by torch._dynamo.mark_dynamic,
as libraries do, are honoured too): `_dynamo_unbacked_indices` (mark_unbacked: a size
with no hint, never specialized to 0 or 1), `_dynamo_dynamic_indices` with
`_dynamo_dynamic_range` (mark_dynamic: symbolic, and specializing it, or a size outside
its min/max, raises ConstraintViolationError), `_dynamo_weak_dynamic_indices`
(maybe_mark_dynamic), `_dynamo_static_indices` (mark_static: static even with
dynamic=True).

Symbolic sizes come from torch's `ShapeEnv`: each dynamic dimension gets a
symbol, fake tensors carry SymInt sizes, and `produce_guards` turns what capture
assumed about the symbols into guard expressions over our sources.
"""

from __future__ import annotations

import dataclasses
import types

import torch
from torch._guards import GuardSource, Source as TorchSource

from .sources import AttrSource, ItemAheadSource, ItemSource, LocalSource, Source, source_record

def symbolic_shapes():
    """torch.fx.experimental.symbolic_shapes, imported at first use (capture's one import of it:
    values/tensors.py and convert.py ask here): it imports sympy, which a process running entries
    from the warm-start cache (runtime/warm_start.py) never needs."""
    # deferred: symbolic_shapes (sympy) costs ~0.6-0.75 s at import; only captures with symbolic sizes need it
    import torch.fx.experimental.symbolic_shapes as module
    return module



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


@source_record
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

    An int (or float) argument is symbolic with dynamic=True, or with dynamic=None once a recompile
    was caused by its value changing (as torch.compile does: `f(x, 2)` then `f(x, 3)` gives
    a graph for 2 and one for any n). So is an int attribute or item of a plain object
    (`scheduler._step_count`, which a training step advances on every call) once it changed;
    those of nn.Modules, classes and modules stay constants, as in torch. 0 and 1 stay
    specialized, as do the values a resume function receives (the results of the Python
    that ran at a break: symbolic, they would turn int-only code after the break into
    graphs of its own)."""

    def __init__(self, dynamic: bool | None, history: dict[str, set[int]],
                 ints: set[str] | None = None, resume: bool = False) -> None:
        self.dynamic = dynamic
        self.history = history  # source expression -> dims seen changing
        self.ints = ints if ints is not None else set()  # int sources seen changing
        self.resume = resume

    def int_symbolic(self, source: Source, value, owner=None) -> bool:
        """Whether the int or float read through `source` (an attribute or item of `owner`) is symbolic.

        Floats follow ints (Dynamo's specialize_float=False): an LR that a scheduler changes on
        every step is a constant in the first graph and a graph input from the first recompile on."""
        if type(value) not in (int, float) or not may_vary(source, owner, self.resume):
            return False
        if type(value) is int and value in (0, 1):
            return False
        if self.dynamic is True and isinstance(source, LocalSource):
            return True
        return self.dynamic is None and source.expression() in self.ints

    def dims(self, source: Source, tensor: torch.Tensor) -> list[int]:
        """The dimensions automatic dynamic or dynamic=True make symbolic (marks aside)."""
        if self.dynamic is False or isinstance(tensor, torch.nn.Parameter):
            return []
        if self.dynamic is True:
            candidates = range(tensor.dim())
        else:
            candidates = self.history.get(source.expression(), ())
        return [d for d in candidates if d < tensor.dim() and tensor.shape[d] >= 2]

    def context(self, source: Source, tensor: torch.Tensor) -> StatelessSymbolicContext | None:
        """How to make `tensor`'s fake: None when every size is static."""
        automatic = set(self.dims(source, tensor))
        marks = TensorMarks.of(tensor)
        kinds = [marks.kind(d, d in automatic) for d in range(tensor.dim())]
        if all(kind is symbolic_shapes().DimDynamic.STATIC for kind in kinds):
            return None
        return symbolic_shapes().StatelessSymbolicContext(dynamic_sizes=kinds,
                                        constraint_sizes=[marks.constraint(d) for d in range(tensor.dim())])

    def any_possible(self, arguments: tuple = ()) -> bool:
        return self.dynamic is True or (self.dynamic is None and (any(self.history.values()) or bool(self.ints))) \
            or any_marked(arguments)


def may_vary(source: Source, owner, resume: bool) -> bool:
    """Whether an int read through `source` is one automatic dynamic follows: an argument of the
    compiled function, or an attribute or item of a plain object (its `owner`)."""
    if isinstance(source, LocalSource):
        return not resume
    if isinstance(source, ItemAheadSource):  # a loop's next item: an int counts up through range()
        return True
    return isinstance(source, (AttrSource, ItemSource)) and owner is not None and \
        not isinstance(owner, (torch.nn.Module, type, types.ModuleType))


@dataclasses.dataclass(frozen=True)
class TensorMarks:
    """The dynamism marks torch's (and tensorjit.compiler's) markers put on one tensor."""

    unbacked: frozenset
    dynamic: frozenset
    ranges: dict
    weak: frozenset
    static: frozenset

    @staticmethod
    def of(tensor: torch.Tensor) -> "TensorMarks":
        read = lambda name: frozenset(getattr(tensor, name, ()))
        ranges = {r.dim: (r.min, r.max) for r in getattr(tensor, "_dynamo_dynamic_range", ())}
        return TensorMarks(read("_dynamo_unbacked_indices") | read("_dynamo_strict_unbacked_indices"),
                           read("_dynamo_dynamic_indices"), ranges, read("_dynamo_weak_dynamic_indices"),
                           read("_dynamo_static_indices"))

    def kind(self, dim: int, automatic: bool) -> DimDynamic:
        """Dynamo's precedence: unbacked, then mark_dynamic / maybe_mark_dynamic, then mark_static."""
        if dim in self.unbacked:
            return symbolic_shapes().DimDynamic.UNBACKED
        if dim in self.dynamic or dim in self.weak:
            return symbolic_shapes().DimDynamic.DYNAMIC
        if dim in self.static or not automatic:
            return symbolic_shapes().DimDynamic.STATIC
        return symbolic_shapes().DimDynamic.DYNAMIC

    def constraint(self, dim: int):
        """mark_dynamic is a promise: produce_guards raises if capture specialized the size."""
        if dim not in self.dynamic:
            return None
        low, high = self.ranges.get(dim, (None, None))
        if low is None and high is None:
            return symbolic_shapes().RelaxedUnspecConstraint(warn_only=False)
        # deferred: torch.utils._sympy (sympy) costs ~0.7 s at import; only a mark_dynamic with bounds needs it
        from torch.utils._sympy.numbers import int_oo
        from torch.utils._sympy.value_ranges import ValueRanges
        return symbolic_shapes().StrictMinMaxConstraint(vr=ValueRanges(lower=low if low is not None else 0,
                                                     upper=high if high is not None else int_oo),
                                      warn_only=False)


_MARKED = "_has_dynamo_dim_marking"


MARK_ATTRIBUTES = ("_dynamo_dynamic_indices", "_dynamo_unbacked_indices", "_dynamo_strict_unbacked_indices",
                   "_dynamo_weak_dynamic_indices")
"""Where markers record symbolic dimensions. Older torch (2.11) sets these without the
`_has_dynamo_dim_marking` flag newer versions add, so a mark is found by either."""


def any_marked(value, depth: int = 3) -> bool:
    """Whether a tensor with dimension marks is among the arguments (looked for in containers too)."""
    if isinstance(value, torch.Tensor):
        return getattr(value, _MARKED, False) or any(getattr(value, name, None) for name in MARK_ATTRIBUTES)
    if depth == 0:
        return False
    if isinstance(value, (list, tuple)):
        return any(any_marked(v, depth - 1) for v in value)
    if isinstance(value, dict):
        return any(any_marked(v, depth - 1) for v in value.values())
    return False


def new_shape_env() -> ShapeEnv:
    return symbolic_shapes().ShapeEnv()


def shape_guards(shape_env: ShapeEnv, fakes: list, sources: list[Source], contexts: list | None = None) -> list[str]:
    """Guard expressions (Python text over L, G, ...) that keep the symbolic graph valid.

    `contexts` (one per fake, None for ints and static tensors) carry mark_dynamic's
    constraints: a marked size that capture specialized raises ConstraintViolationError."""
    if not fakes:
        return []
    # ignore_static=False: sizes that were specialized (range(n), a branch on n) and the
    # static sizes of tensors with some dynamic ones need their guards too.
    return list(shape_env.produce_guards(fakes, [ExpressionSource(s.expression()) for s in sources],
                                         input_contexts=contexts, ignore_static=False))


def name_sizes_for_messages(shape_env: ShapeEnv, source: Source, rank: int) -> None:
    """Name `source`'s sizes in ShapeEnv's errors as torch does (`L['x'].size()[0]`), not as guards read them."""
    user = f"L[{str(source)!r}]" if isinstance(source, LocalSource) else str(source)
    for dim in range(rank):
        shape_env.source_name_to_debug_name[f"{source.expression()}.size()[{dim}]"] = f"{user}.size()[{dim}]"


def symbolic_int(shape_env: ShapeEnv, value: int, source: Source) -> torch.SymInt:
    """A SymInt standing for the int argument read through `source` (hint: `value`)."""
    named = ExpressionSource(source.expression())
    symbol = shape_env.create_symbol(value, named, dynamic_dim=symbolic_shapes().DimDynamic.DYNAMIC, positive=None)
    return shape_env.create_symintnode(symbol, hint=value, source=named)


def symbolic_float(shape_env: ShapeEnv, value: float, source: Source) -> torch.SymFloat:
    """A SymFloat standing for the float read through `source` (hint: `value`)."""
    named = ExpressionSource(source.expression())
    symbol = shape_env.create_unspecified_symbol(value, named, dynamic_dim=symbolic_shapes().DimDynamic.DYNAMIC)
    return shape_env.create_symfloatnode(symbol, hint=value, source=named)


def record_changed_dims(history: dict[str, set[int]], source: str, before: tuple, after: tuple) -> None:
    if len(before) != len(after):
        return
    changed = {d for d, (a, b) in enumerate(zip(before, after)) if a != b}
    if changed:
        history.setdefault(source, set()).update(changed)
