"""Where a value seen during capture came from.

A `Source` is a frozen record that names a path from the frame's inputs to a
value: the 2nd argument, the global `torch`, `self.fc1.weight`, `xs[3]`.
Sources serve two purposes: guards re-read the value through the same path on
every call (`expression()` is a Python expression over `L`, the tuple of bound
arguments, and `G`, the function's globals), and generated code reads graph
inputs through them.
"""

from __future__ import annotations

from dataclasses import dataclass


class Source:
    __slots__ = ("_hash",)  # remembered by `source_record`'s __hash__, outside equality and pickles

    def expression(self) -> str:
        raise NotImplementedError

    def base(self) -> "Source | None":
        return None

    def root(self) -> "Source":
        base = self.base()
        return self if base is None else base.root()

    def __str__(self) -> str:
        return self.expression()


def source_record(cls: type) -> type:
    """A frozen dataclass with slots whose hash is computed once. Sources nest (`self.h[3].attn.
    c_attn.weight` is seven records), and the dataclass hash hashes the whole chain each time
    one is a key: capture's tables, the guard set and the guard emitter look up GPT-2's sources
    about 25,000 times. Equality still compares fields; a pickle or copy leaves the hash out (a
    string's hash differs between processes)."""
    cls = dataclass(frozen=True, slots=True)(cls)
    compute = cls.__hash__

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            value = compute(self)
            object.__setattr__(self, "_hash", value)
            return value
    cls.__hash__ = __hash__
    return cls


@source_record
class LocalSource(Source):
    """An argument of the compiled function, by position in the bound tuple."""

    index: int
    name: str

    def expression(self) -> str:
        return f"L[{self.index}]"

    def __str__(self) -> str:
        if self.name.startswith(STACK_PREFIX):  # a resume function's stack slot has no name in the user's code
            return f"<intermediate value {self.name[len(STACK_PREFIX):]} at the graph break>"
        return self.name


STACK_PREFIX = "__tj_stack"
"""Parameters of resume functions that carry the stack at a graph break (`resume.resume_code`)."""


@source_record
class GlobalSource(Source):
    name: str

    def expression(self) -> str:
        return f"G[{self.name!r}]"

    def __str__(self) -> str:
        return self.name


@source_record
class BuiltinSource(Source):
    name: str

    def expression(self) -> str:
        return f"B[{self.name!r}]"

    def __str__(self) -> str:
        return self.name


@source_record
class ClosureSource(Source):
    """A free variable of the compiled function (its cell's contents)."""

    index: int
    name: str

    def expression(self) -> str:
        return f"C[{self.index}].cell_contents"

    def __str__(self) -> str:
        return self.name


@source_record
class AttrSource(Source):
    of: Source
    name: str

    def expression(self) -> str:
        return f"{self.of.expression()}.{self.name}" if self.name.isidentifier() else (
            f"getattr({self.of.expression()}, {self.name!r})"
        )

    def base(self) -> Source:
        return self.of

    def __str__(self) -> str:
        return f"{self.of}.{self.name}"


@source_record
class ItemSource(Source):
    """`of[key]` for a list, tuple or dict item; `key` is a Python constant."""

    of: Source
    key: object

    def expression(self) -> str:
        return f"{self.of.expression()}[{self.key!r}]"

    def base(self) -> Source:
        return self.of

    def __str__(self) -> str:
        return f"{self.of}[{self.key!r}]"


@source_record
class DefaultSource(Source):
    """A default argument value of a function reached through `of`."""

    of: Source
    index: int
    keyword: str | None = None

    def expression(self) -> str:
        if self.keyword is not None:
            return f"{self.of.expression()}.__kwdefaults__[{self.keyword!r}]"
        return f"{self.of.expression()}.__defaults__[{self.index}]"

    def base(self) -> Source:
        return self.of


@source_record
class CellSource(Source):
    """The contents of closure cell `index` of the function reached through `of`."""

    of: Source
    index: int

    def expression(self) -> str:
        return f"{self.of.expression()}.__closure__[{self.index}].cell_contents"

    def base(self) -> Source:
        return self.of


@source_record
class SelfSource(Source):
    """The module a compiled nn.Module wrapper forwards to (bound at wrapper creation)."""

    def expression(self) -> str:
        return "L[0]"


@source_record
class ModuleGlobalSource(Source):
    """A global of another module, read from `sys.modules` (for inlined library code)."""

    module: str
    name: str

    def expression(self) -> str:
        return f"S[{self.module!r}].__dict__[{self.name!r}]"

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


@source_record
class EnvironSource(Source):
    """`os.environ.get(key)`: one environment variable, read and guarded by itself."""

    key: str

    def expression(self) -> str:
        return f"S['os'].environ.get({self.key!r})"

    def __str__(self) -> str:
        return f"os.environ[{self.key!r}]"


@source_record
class ReduceSource(Source):
    """`of.__reduce__()`: how an iterator exposes its sequence and position without advancing."""

    of: Source

    def expression(self) -> str:
        return f"{self.of.expression()}.__reduce__()"

    def base(self) -> Source:
        return self.of


def _iterator_state(iterator) -> tuple:
    """The sequence under a list, tuple or range iterator and how many items it gave, read
    without advancing it (an exhausted one reduces to an empty sequence; 3.13's range iterator
    to the range still ahead, with no position)."""
    _, arguments, *state = iterator.__reduce__()
    position = state[0] if state and state[0] is not None else 0
    return arguments[0], position


def items_left(iterator) -> int:
    sequence, position = _iterator_state(iterator)
    return max(len(sequence) - position, 0)


def item_ahead(iterator, ahead: int):
    sequence, position = _iterator_state(iterator)
    return sequence[position + ahead]


@source_record
class ItemsLeftSource(Source):
    """How many items a list, tuple or range iterator has still to give."""

    of: Source

    def expression(self) -> str:
        return f"S[{__name__!r}].items_left({self.of.expression()})"

    def base(self) -> Source:
        return self.of

    def __str__(self) -> str:
        return f"items left in {self.of}"


@source_record
class ItemAheadSource(Source):
    """The item a list, tuple or range iterator gives after `ahead` more: read by position from
    wherever the iterator is, so the entry of a loop's resume function serves every iteration."""

    of: Source
    ahead: int

    def expression(self) -> str:
        return f"S[{__name__!r}].item_ahead({self.of.expression()}, {self.ahead})"

    def base(self) -> Source:
        return self.of

    def __str__(self) -> str:
        return f"item {self.ahead} ahead of {self.of}"


@source_record
class ProxiedMappingSource(Source):
    """The dict a types.MappingProxyType views (the one object the proxy refers to)."""

    of: Source

    def expression(self) -> str:
        return f"S['gc'].get_referents({self.of.expression()})[0]"

    def base(self) -> Source:
        return self.of

    def __str__(self) -> str:
        return f"the mapping {self.of} views"


@source_record
class ReferentSource(Source):
    """`of()` where `of` is a weakref.ref: the object it refers to (None once that died)."""

    of: Source

    def expression(self) -> str:
        return f"{self.of.expression()}()"

    def base(self) -> Source:
        return self.of


@source_record
class SubclassesSource(Source):
    """`type.__subclasses__(of)` where `of` is a class: its subclasses alive now."""

    of: Source

    def expression(self) -> str:
        return f"type.__subclasses__({self.of.expression()})"

    def base(self) -> Source:
        return self.of


@source_record
class TensorKeySource(Source):
    """`of[key]` for a dict keyed by tensors (an optimizer's `state[param]`); `key` is the tensor's
    source. Read with .get so that checking a guard never runs a defaultdict's factory."""

    of: Source
    key: Source

    def expression(self) -> str:
        return f"{self.of.expression()}.get({self.key.expression()})"

    def base(self) -> Source:
        return self.of

    def __str__(self) -> str:
        return f"{self.of}[{self.key}]"


def is_literal_key(key) -> bool:
    """A key whose repr reads back as an equal key (a dict may be keyed by classes, torch.Size, objects)."""
    if type(key) is tuple:
        return all(is_literal_key(k) for k in key)
    if type(key) is float:
        return key == key and key not in (float("inf"), float("-inf"))
    return key is None or type(key) in (bool, int, str, bytes)


def render(source: Source, name_constant) -> str:
    """Python text reading `source`, where an item key without a literal form is the name
    `name_constant(key)` gives it (the generated function holds the key itself)."""
    if isinstance(source, ItemSource):
        key = repr(source.key) if is_literal_key(source.key) else name_constant(source.key)
        return f"{render(source.of, name_constant)}[{key}]"
    if isinstance(source, AttrSource):
        of = render(source.of, name_constant)
        return f"{of}.{source.name}" if source.name.isidentifier() else f"getattr({of}, {source.name!r})"
    return source.expression()
