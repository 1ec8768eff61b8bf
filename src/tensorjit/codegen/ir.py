"""Loop-level IR of the code generator.

Takes nothing; defines the values lowering produces and emitters consume:
index expressions (integer arithmetic over loop variables), scalar expressions
(loads, constants, ops of the `ops` protocol), and kernels (Pointwise,
Reduction) plus Extern steps that call an ATen kernel. Every node is a frozen
dataclass with slots; `str()` prints readable Python-like text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union


def _remembered_hash():
    """The field that holds a node's hash once computed. Expressions share subtrees (lowering
    reuses one value in several places), so a hash computed anew at every level visits each
    shared subtree once per path to it: exponential in the depth of the sharing, and the
    largest cost of a cold compile (ResNet-18's kernels: 30 million hash calls). Excluded from
    equality, repr and `__init__`, and from pickling (`__reduce__`: string hashes differ
    between processes)."""
    return field(default=None, init=False, repr=False, compare=False)


def _remembered():
    """The field that holds what a pass computes of a kernel once (`memory.names_read`): kernels
    are frozen, so the answer never changes, and passes ask it of the same kernels many times.
    Excluded from equality, repr and `__init__` (`dataclasses.replace` builds a new kernel
    without it)."""
    return field(default=None, init=False, repr=False, compare=False)


def _hash_once(node, key: tuple) -> int:
    value = node._hash
    if value is None:
        value = hash((type(node).__name__, *key))
        object.__setattr__(node, "_hash", value)
    return value


# -- index expressions (integers) ---------------------------------------------
@dataclass(frozen=True, slots=True)
class IndexVar:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class IndexConst:
    value: int

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, slots=True)
class IndexOp:
    """op is one of "add", "mul", "floordiv", "mod" (operands are non-negative)."""

    op: str
    left: "Index"
    right: "Index"
    _hash: int | None = _remembered_hash()

    def __hash__(self) -> int:
        return _hash_once(self, (self.op, self.left, self.right))

    def __reduce__(self):
        return type(self), (self.op, self.left, self.right)

    def __str__(self) -> str:
        symbol = {"add": "+", "mul": "*", "floordiv": "//", "mod": "%"}[self.op]
        return f"({self.left} {symbol} {self.right})"


@dataclass(frozen=True, slots=True)
class IndirectIndex:
    """An index read from memory: the integer `value` (a scalar expression, usually the load
    of an index tensor: gather, embedding, x[idx]) used as a position along a dimension of
    `size` elements. With `wrap`, a negative value counts from the end (value + size), as
    x[idx] does; embedding, index_select and gather take none.

    A value outside the range is an error in eager, so every emitter checks it and never
    reads out of bounds: the C++ kernel reads element 0 instead and reports it (the wrapper
    then runs the graph through ATen, which raises eager's own error), Triton asserts on the
    device (`tl.device_assert`, as eager's CUDA kernels do) and reads element 0. After the
    check the index lies in [0, size), which is what index arithmetic may assume of it."""

    value: "Expr"
    size: int
    wrap: bool = False
    _hash: int | None = _remembered_hash()

    def __hash__(self) -> int:
        return _hash_once(self, (self.value, self.size, self.wrap))

    def __reduce__(self):
        return type(self), (self.value, self.size, self.wrap)

    def __str__(self) -> str:
        return f"indirect({self.value}, {self.size}{', wrap' if self.wrap else ''})"


Index = Union[IndexVar, IndexConst, IndexOp, IndirectIndex]


def index_add(left: Index, right: Index) -> Index:
    if isinstance(left, IndexConst) and left.value == 0:
        return right
    if isinstance(right, IndexConst) and right.value == 0:
        return left
    if isinstance(left, IndexConst) and isinstance(right, IndexConst):
        return IndexConst(left.value + right.value)
    return IndexOp("add", left, right)


def index_mul(left: Index, right: Index) -> Index:
    for a, b in ((left, right), (right, left)):
        if isinstance(a, IndexConst):
            if a.value == 0:
                return IndexConst(0)
            if a.value == 1:
                return b
            if isinstance(b, IndexConst):
                return IndexConst(a.value * b.value)
    return IndexOp("mul", left, right)


def index_floordiv(left: Index, right: int) -> Index:
    if right == 1:
        return left
    return IndexOp("floordiv", left, IndexConst(right))


def index_mod(left: Index, right: int) -> Index:
    if right == 1:
        return IndexConst(0)
    return IndexOp("mod", left, IndexConst(right))


def strided_index(indices: tuple[Index, ...], strides: tuple[int, ...], offset: int = 0) -> Index:
    """offset + sum(index * stride): the flat element offset of a strided layout."""
    total: Index = IndexConst(offset)
    for index, stride in zip(indices, strides):
        total = index_add(total, index_mul(index, IndexConst(stride)))
    return total


def indirect_indices(index: Index) -> list[IndirectIndex]:
    """The IndirectIndex atoms of `index` (not those nested inside their values)."""
    if isinstance(index, IndirectIndex):
        return [index]
    if isinstance(index, IndexOp):
        return indirect_indices(index.left) + indirect_indices(index.right)
    return []


# -- scalar expressions ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Load:
    buffer: str
    index: Index
    dtype: str
    _hash: int | None = _remembered_hash()

    def __hash__(self) -> int:
        return _hash_once(self, (self.buffer, self.index, self.dtype))

    def __reduce__(self):
        return type(self), (self.buffer, self.index, self.dtype)

    def __str__(self) -> str:
        return f"load({self.buffer}, {self.index})"


@dataclass(frozen=True, slots=True)
class Constant:
    value: Any  # int, float or bool; float("inf") and nan allowed
    dtype: str  # one of DTYPES

    def __str__(self) -> str:
        return f"constant({self.value!r}, {self.dtype})"


@dataclass(frozen=True, slots=True)
class IndexValue:
    """An index expression used as a value (iota/arange)."""

    index: Index
    dtype: str
    _hash: int | None = _remembered_hash()

    def __hash__(self) -> int:
        return _hash_once(self, (self.index, self.dtype))

    def __reduce__(self):
        return type(self), (self.index, self.dtype)

    def __str__(self) -> str:
        return f"index_expr({self.index}, {self.dtype})"


@dataclass(frozen=True, slots=True)
class Op:
    """A call of the `ops` protocol method `name` (add, exp, where, to_dtype...).

    `dtype` is the result dtype; `extra` holds non-expression arguments
    (the target dtype of to_dtype)."""

    name: str
    args: tuple["Expr", ...]
    dtype: str
    extra: tuple = ()
    _hash: int | None = _remembered_hash()

    def __hash__(self) -> int:
        return _hash_once(self, (self.name, self.args, self.dtype, self.extra))

    def __reduce__(self):
        return type(self), (self.name, self.args, self.dtype, self.extra)

    def __str__(self) -> str:
        parts = [str(a) for a in self.args] + [repr(e) for e in self.extra]
        return f"{self.name}({', '.join(parts)})"


Expr = Union[Load, Constant, IndexValue, Op]

def extent(buffer: "Buffer") -> int:
    """One past the largest element offset of `buffer` (0 when it has no elements)."""
    if any(size == 0 for size in buffer.shape):
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(buffer.shape, buffer.strides))


def variables_of(node) -> set[str]:
    """The loop variables an index or scalar expression depends on (through loaded indices too)."""
    if isinstance(node, IndexVar):
        return {node.name}
    if isinstance(node, IndexOp):
        return variables_of(node.left) | variables_of(node.right)
    if isinstance(node, IndirectIndex):
        return variables_of(node.value)
    if isinstance(node, (Load, IndexValue)):
        return variables_of(node.index)
    if isinstance(node, Op):
        return set().union(*(variables_of(a) for a in node.args))
    return set()


def checks_indices(step) -> bool:
    """Does the kernel (or group) `step` read through an IndirectIndex, so that it checks
    index ranges at run time?"""
    members = step.members if isinstance(step, LoopGroup) else (step,)
    if any(indirect_indices(m.scatter.index) for m in members if getattr(m, "scatter", None) is not None):
        return True
    return any(reads_indirectly(m.body) for m in members if hasattr(m, "body"))


def reads_indirectly(expr, seen: set | None = None) -> bool:
    """Does the scalar expression `expr` read or index through an IndirectIndex? (`seen`: the
    shared subexpressions already found not to, walked once.)"""
    if isinstance(expr, (Load, IndexValue)):
        return bool(indirect_indices(expr.index))
    if not isinstance(expr, Op):
        return False
    seen = set() if seen is None else seen
    if id(expr) in seen:
        return False
    seen.add(id(expr))
    return any(reads_indirectly(a, seen) for a in expr.args)


DTYPES = ("float32", "float64", "int64", "int32", "bool")
HALF_DTYPES = ("float16", "bfloat16")
"""Half floats: only emitters that compute them (Triton) receive them (values.HALF_FLOATS)."""


# -- buffers and kernels ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Buffer:
    """A tensor in memory. kind: "input" (graph input i), "temp" (allocated by
    the wrapper), "extern" (returned by an ATen call)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    kind: str = "temp"

    def __str__(self) -> str:
        return f"{self.name}: {self.kind} {self.dtype}{list(self.shape)} strides={list(self.strides)}"


@dataclass(frozen=True, slots=True)
class Scatter:
    """Where a scattering Pointwise writes (scatter, scatter_add, index_put): element
    `index` (flat, usually holding an IndirectIndex) of its output, assigned or, with
    `accumulate`, added to. The output is `base`'s memory updated in place: `base` is a
    temporary written by an earlier kernel (the values not written over) and read by no
    later step; the wrapper names the same tensor `output` from then on. Indices may repeat,
    so kernels run it in order (C++: one thread) or with atomic adds (Triton)."""

    base: str
    index: Index
    accumulate: bool = False


@dataclass(frozen=True, slots=True)
class Pointwise:
    """for index in ranges: store(output, contiguous(index), body); with `scatter`, the
    store goes to `scatter.index` of the output instead (see Scatter). `store`, when set,
    is where element `variables` goes in a kernel whose loops no longer match its output's
    dims (schedule.over_rows: a flattened kernel re-expressed over a group's row loops)."""

    name: str
    output: str
    ranges: tuple[int, ...]
    body: Expr
    variables: tuple[IndexVar, ...]
    scatter: Scatter | None = None
    store: Index | None = None
    _reads: frozenset | None = _remembered()

    def __str__(self) -> str:
        loops = ", ".join(f"{v} < {r}" for v, r in zip(self.variables, self.ranges))
        if self.scatter is not None:
            operator = "+=" if self.scatter.accumulate else "="
            return (f"{self.name}: for {loops}: {self.output}[{self.scatter.index}] {operator} {self.body}"
                    f"  (in place of {self.scatter.base})")
        return f"{self.name}: for {loops}: {self.output}[...] = {self.body}"


def store_index(kernel: "Pointwise", output: Buffer) -> Index:
    """Where a Pointwise kernel writes element `kernel.variables` of `output`. A kernel may
    loop over fewer dims than the buffer has: then it skips the buffer's size-1 dims
    (`codegen.squeeze`), whose index is always 0. A scattering kernel writes at its
    scatter index."""
    if kernel.scatter is not None:
        return kernel.scatter.index
    if kernel.store is not None:
        return kernel.store
    strides = output.strides
    if len(kernel.variables) != len(output.shape):
        strides = tuple(stride for stride, size in zip(output.strides, output.shape) if size != 1)
    return strided_index(kernel.variables, strides)


@dataclass(frozen=True, slots=True)
class Reduction:
    """for index in ranges: output[index] = reduce(reduction_type, body over reduction_ranges).

    reduction_type: "sum", "max", "min", "prod", "any", "argmax", "argmin"."""

    name: str
    output: str
    ranges: tuple[int, ...]
    reduction_ranges: tuple[int, ...]
    reduction_type: str
    body: Expr
    variables: tuple[IndexVar, ...]
    reduction_variables: tuple[IndexVar, ...]
    dtype: str
    divisor: int = 1  # mean/var: the stored value is the reduced value / divisor
    _reads: frozenset | None = _remembered()

    def __str__(self) -> str:
        loops = ", ".join(f"{v} < {r}" for v, r in zip(self.variables, self.ranges))
        inner = ", ".join(f"{v} < {r}" for v, r in zip(self.reduction_variables, self.reduction_ranges))
        return f"{self.name}: for {loops}: {self.output}[...] = {self.reduction_type}(for {inner}: {self.body})" + \
            (f" / {self.divisor}" if self.divisor != 1 else "")


@dataclass(frozen=True, slots=True)
class Extern:
    """Call an ATen (or Python) callable on runtime values; `args`/`kwargs`
    reference buffers by name through `BufferRef`."""

    name: str
    target: Any
    args: tuple
    kwargs: tuple  # tuple of (key, value) pairs
    output: str

    def __str__(self) -> str:
        return f"{self.output} = extern {getattr(self.target, '__name__', self.target)}{self.args}"


@dataclass(frozen=True, slots=True)
class BufferRef:
    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class LoopGroup:
    """for index in ranges: run each member's remaining loops, in order, for row `index`.

    Members are Pointwise/Reduction kernels whose ranges start with `ranges` (a
    reduction's kept ranges equal them). A member reads what an earlier member
    wrote only inside the same row (`schedule.py` checks this), so rows are
    independent and run in parallel, and a row's data stays in cache between
    members: softmax and layer norm become one pass over memory. `local` buffers
    are read and written only inside a row: each thread keeps one row of them
    in a scratch array and they are never allocated in memory."""

    name: str
    ranges: tuple[int, ...]
    variables: tuple[IndexVar, ...]
    members: tuple[Union[Pointwise, Reduction], ...]
    local: tuple[str, ...] = ()
    _reads: frozenset | None = _remembered()

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(m.output for m in self.members if m.output not in self.local)

    def __str__(self) -> str:
        loops = ", ".join(f"{v} < {r}" for v, r in zip(self.variables, self.ranges))
        members = "\n".join(f"  {m}" for m in self.members)
        local = f" (row-local: {', '.join(self.local)})" if self.local else ""
        return f"{self.name}: for {loops}:{local}\n{members}"


Kernel = Union[Pointwise, Reduction, Extern, LoopGroup]


@dataclass(frozen=True, slots=True)
class Program:
    """A lowered graph: buffers, ordered steps, and the names the graph returns."""

    buffers: tuple[Buffer, ...]
    steps: tuple[Kernel, ...]
    inputs: tuple[str, ...]
    outputs: tuple[Any, ...]  # buffer names, or raw Python values (None, ints)

    def __str__(self) -> str:
        lines = [str(b) for b in self.buffers] + [str(s) for s in self.steps]
        lines.append(f"return {self.outputs}")
        return "\n".join(lines)
