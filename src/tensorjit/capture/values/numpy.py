"""NumPy arrays in the graph: an ndarray is a tensor there, and NumPy calls are torch operations.

Inside a compiled function an `numpy.ndarray` is a `NumpyArrayValue`: a `TensorValue` (its node
produces the array's data as a tensor, sharing memory with the array where Python would) whose
operations follow NumPy's rules, not torch's. Those rules come from `torch._numpy`, torch's
NumPy-compatible API written in torch operations: every operation on arrays becomes one graph
node whose target is a `NumpyCall`, which views its tensors as `torch._numpy.ndarray`s, runs the
NumPy-compatible function, and hands back the tensors of the arrays it returns. Tracing the graph
later (autograd, codegen) goes through the torch operations inside.

Where arrays meet the outside:
- an ndarray passed in is a graph input read through `NumpyTensorSource` (`torch.from_numpy` of
  it: the same memory, so a write in the graph is a write to the caller's array);
- an array the function returns, or keeps across a graph break, is rebuilt with `.numpy()` of the
  graph's output tensor (`to_ndarray`);
- `Tensor.numpy()` and `torch.from_numpy` / `torch.as_tensor` are conversions of one node, not breaks.

What has no NumPy-compatible rule (a torch function given an array, mixing a tensor and an array
in one operator, NumPy's random streams) is a graph break with its reason, and runs eagerly.
The table of NumPy functions is capture/polyfills/numpy.py.
"""

from __future__ import annotations

import functools
import inspect
import operator
import warnings
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from ..aliasing import storage_key
from ..breaks import GraphBreak
from ..guards import Guard
from ..sources import Source, source_record
from .base import ConstantValue, Value
from .containers import DictValue, ListValue, SliceValue, TupleValue
from . import tensors
from .tensors import SymbolicIntValue, TensorValue, record_call

try:
    import numpy
except ImportError:  # pragma: no cover - torch's wheels depend on numpy
    numpy = None


def torch_numpy():
    """torch._numpy, imported at first use (capture's one import of it: polyfills/numpy.py asks here)."""
    # deferred: torch._numpy costs ~13 ms at import; programs without NumPy code never need it
    import torch._numpy as module
    return module


def is_ndarray(obj: Any) -> bool:
    return numpy is not None and type(obj) is numpy.ndarray


def is_numpy_scalar(obj: Any) -> bool:
    return numpy is not None and isinstance(obj, numpy.generic)


def is_numpy_constant(obj: Any) -> bool:
    """A NumPy scalar or dtype: plain constants of the program, compared by value (scalar types are
    classes, read as other classes are, and called through the table)."""
    return numpy is not None and isinstance(obj, (numpy.generic, numpy.dtype))


# -- run-time helpers (named by generated code) -------------------------------------------
def as_tensor(array):
    """The tensor sharing `array`'s memory, or None where torch cannot view it (negative strides,
    object or unsupported dtypes: the guard on it then fails and the call is captured anew)."""
    if type(array) is not numpy.ndarray:
        return None
    try:
        if not array.flags.writeable:  # torch warns that writes would be undefined: the graph's are not made
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(array)
        return torch.from_numpy(array)
    except (TypeError, ValueError, RuntimeError):
        return None


def writable_tensor(array):
    """as_tensor of an array NumPy lets the program write to (else None: the guard fails)."""
    return as_tensor(array) if type(array) is numpy.ndarray and array.flags.writeable else None


def read_only_tensor(array):
    """as_tensor of a read-only array (np.broadcast_to's, a view of frozen memory), else None."""
    return as_tensor(array) if type(array) is numpy.ndarray and not array.flags.writeable else None


def viewable(array) -> bool:
    """Whether the graph can hold `array`: torch views its memory, and torch._numpy knows its dtype."""
    tensor = as_tensor(array)
    return tensor is not None and tensor.dtype in _NUMPY_DTYPES


def to_ndarray(tensor: torch.Tensor):
    """The ndarray an array of the graph is at its output: the tensor's memory, seen by NumPy."""
    return tensor.detach().numpy(force=True)


@source_record
class NumpyTensorSource(Source):
    """The tensor view of an ndarray read through `of` (`torch.from_numpy(of)`)."""

    of: Source
    read_only: bool = False  # an array NumPy refuses writes to: the guard holds only while it is so

    def expression(self) -> str:
        reader = "read_only_tensor" if self.read_only else "writable_tensor"
        return f"S[{__name__!r}].{reader}({self.of.expression()})"

    def base(self) -> Source:
        return self.of

    def __str__(self) -> str:
        return f"torch.from_numpy({self.of})"


# -- dtypes --------------------------------------------------------------------------------
def numpy_dtype(dtype: torch.dtype):
    """NumPy's dtype for a torch dtype (what `array.dtype` answers)."""
    return numpy.dtype(str(dtype).removeprefix("torch."))


# -- the graph's target --------------------------------------------------------------------
class _Slot:
    """Where a graph node's value goes in a NumpyCall's arguments."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Scalar:
    """A NumPy scalar in a NumpyCall's template: its Python value and dtype name (NumPy's own
    scalar, given a torch._numpy array, would turn it into a NumPy array)."""

    __slots__ = ("value", "dtype")

    def __init__(self, value, dtype: str) -> None:
        self.value = value
        self.dtype = dtype


class NumpyCall:
    """A graph node's target: `function(*arguments)` with torch._numpy's rules. The arguments are a
    template whose slots the node's inputs fill; constants stay in the template (NumPy scalars and
    dtypes have no text FX could print). Tensors become torch._numpy arrays on the way in, arrays
    become tensors on the way out; a method is named by a string, called on the first argument."""

    def __init__(self, function: Callable | str, template: tuple, name: str) -> None:
        self.function = function
        self.template = template
        self.mutates = False  # it writes to an array (`a[0] = 1`, `a += 1`): dead-code elimination keeps it
        self.__name__ = f"numpy_{name}"
        self.__qualname__ = self.__name__
        self.__module__ = __name__

    def __call__(self, *values):
        tnp = torch_numpy()

        def fill(leaf):
            if isinstance(leaf, _Slot):
                leaf = values[leaf.index]
            if isinstance(leaf, _Scalar):  # a NumPy scalar: a 0-d array of its dtype, as NumPy promotes it
                return tnp.asarray(leaf.value, dtype=leaf.dtype)
            return tnp.ndarray(leaf) if isinstance(leaf, torch.Tensor) else leaf

        args, kwargs = pytree.tree_map(fill, self.template)
        if self.function in (tnp.array, tnp.asarray) and args and _holds_arrays(args[0]):
            args = (_stacked(args[0]), *args[1:])
        elif callable(self.function) and _array_parameters(self.function):
            args, kwargs = _stack_array_likes(self.function, args, kwargs)
        if self.function is tnp.where and len(args) == 3 and all(type(v) in (bool, int, float, complex)
                                                                 for v in args[1:]):
            # two Python numbers: NumPy's float64/complex128, where torch would make float32/complex64
            args = (args[0], *(tnp.asarray(v) if type(v) in (float, complex) else v for v in args[1:]))
        if self.function in _INT_TO_FLOAT or self.function in _int_to_float_functions():
            args = tuple(_as_float(a) for a in args)
        if isinstance(self.function, str) and self.function.startswith("@"):  # an attribute (a.T)
            result = getattr(args[0], self.function[1:])
        elif isinstance(self.function, str):  # a method (a.sum(axis=0))
            result = getattr(args[0], self.function)(*args[1:], **kwargs)
        else:
            result = self.function(*args, **kwargs)
        return pytree.tree_map(_out_of_numpy, result)

    def __repr__(self) -> str:
        return self.__name__


_INT_TO_FLOAT = {operator.truediv, "__truediv__", "__rtruediv__"}
"""Divisions of integers: torch gives its default float dtype (float32) where NumPy gives float64."""


def _int_to_float_functions() -> tuple:
    tnp = torch_numpy()
    return (tnp.true_divide, tnp.divide, tnp.arctan2)


def _as_float(argument):
    """An integer or bool array as float64 (NumPy's float for them), so that torch's integer
    division, which makes its default float dtype, makes NumPy's."""
    tnp = torch_numpy()
    if isinstance(argument, tnp.ndarray) and not argument.tensor.is_floating_point() and \
            not argument.tensor.is_complex():
        return argument.astype(tnp.float64)
    return argument


def _holds_arrays(value) -> bool:
    tnp = torch_numpy()
    return isinstance(value, (list, tuple)) and any(isinstance(leaf, tnp.ndarray) for leaf in pytree.tree_leaves(value))


@functools.cache
def _array_parameters(function) -> tuple:
    """The parameters torch._numpy reads as one array (annotated ArrayLike): a list of arrays
    given there is stacked first (`np.mean([a, b])`)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(name for name, p in parameters.items()
                 if isinstance(p.annotation, str) and p.annotation.startswith("ArrayLike"))


def _stack_array_likes(function, args: tuple, kwargs: dict) -> tuple:
    try:
        bound = inspect.signature(function).bind_partial(*args, **kwargs)
    except TypeError:
        return args, kwargs  # torch._numpy raises the program's error itself
    names = _array_parameters(function)
    for name in names:
        if name in bound.arguments and _holds_arrays(bound.arguments[name]):
            bound.arguments[name] = _stacked(bound.arguments[name])
    return bound.args, bound.kwargs


def _stacked(items):
    """A nested sequence holding arrays as one array (`np.array([a, b])`): torch._numpy's constructor
    reads such a sequence item by item into Python, which the graph cannot do; stacked, the items
    keep NumPy's promotion of their dtypes."""
    tnp = torch_numpy()
    arrays = [_stacked(i) if isinstance(i, (list, tuple)) else tnp.asarray(i) for i in items]
    dtype = tnp.result_type(*arrays)
    return tnp.stack([a.astype(dtype) for a in arrays])


def _out_of_numpy(leaf):
    tnp = torch_numpy()
    if isinstance(leaf, tnp.ndarray):
        return leaf.tensor
    if isinstance(leaf, tnp.DType):
        return leaf.torch_dtype  # numpy_result turns it back into NumPy's dtype
    return leaf


def _template_constant(value: Any) -> Any:
    """A constant argument as torch._numpy takes it."""
    if numpy is None:
        return value
    if isinstance(value, numpy.dtype):
        return value.name
    if isinstance(value, numpy.generic):
        return _Scalar(value.item(), value.dtype.name)
    if isinstance(value, type) and issubclass(value, numpy.generic):
        tnp_type = getattr(torch_numpy(), value.__name__, None)
        if tnp_type is None:
            raise GraphBreak("numpy", f"torch._numpy has no type {value.__name__}")
        return tnp_type
    return value


class NumpyArrayValue(TensorValue):
    """A numpy.ndarray of the graph: `node` produces its data as a tensor (`example` is its fake).
    `read_only`: NumPy refuses writes to it (a read-only array passed in, or a view of one)."""

    __slots__ = ("read_only",)

    def __init__(self, node, example, source=None, cls=None, read_only: bool = False) -> None:
        super().__init__(node, example, source, cls)
        self.read_only = read_only

    def python_type(self) -> type:
        return numpy.ndarray

    def getattr(self, tx, name: str) -> Value:
        example = self.example
        if name == "shape":
            shape = tuple(example.shape)
            if not any(isinstance(s, torch.SymInt) for s in shape):
                return ConstantValue(shape)
        if name == "ndim":
            return ConstantValue(example.dim())
        if name == "dtype":
            return ConstantValue(numpy_dtype(example.dtype))
        if name == "itemsize":
            return ConstantValue(example.element_size())
        if name == "size" and not any(isinstance(s, torch.SymInt) for s in example.shape):
            return ConstantValue(example.numel())
        if name == "nbytes" and not any(isinstance(s, torch.SymInt) for s in example.shape):
            return ConstantValue(example.numel() * example.element_size())
        if name == "strides" and not any(isinstance(s, torch.SymInt) for s in example.stride()):
            return ConstantValue(tuple(s * example.element_size() for s in example.stride()))
        if name == "__class__":
            return tx.wrap_constant_object(numpy.ndarray)
        if name in ("data", "base", "ctypes", "flags", "__array_interface__"):
            raise GraphBreak("numpy", f"ndarray.{name} is a run-time object of the array")
        attribute = getattr(torch_numpy().ndarray, name, None)
        if attribute is None:
            raise GraphBreak("numpy", f"ndarray.{name} has no torch._numpy counterpart",
                             exception=AttributeError(f"'numpy.ndarray' object has no attribute '{name}'")
                             if not hasattr(numpy.ndarray, name) else None)
        if callable(attribute):
            return NumpyMethodValue(self, name)
        return record_numpy_call(tx, "@" + name, [self], {}, name)

    def unpack(self, tx) -> list[Value]:
        if not self.example.dim():
            error = TypeError("iteration over a 0-d array")
            raise GraphBreak("iterate", str(error), exception=error)
        size = self.example.shape[0]
        if isinstance(size, torch.SymInt):
            raise GraphBreak("iterate", "iteration over an array of symbolic length")
        return [record_numpy_call(tx, operator.getitem, [self, ConstantValue(i)], {}, "getitem")
                for i in range(size)]

    def reconstruct(self, cg) -> str:
        if self.source is not None:
            return cg.source(self.source)  # the caller's own array
        return cg._built_once(self, lambda cg: f"{cg.constant(to_ndarray)}({cg.tensor(_AsTensor(self))})")

    def __repr__(self) -> str:
        return f"NumpyArrayValue({self.node.name}, {tuple(self.example.shape)}, {self.example.dtype})"


def _AsTensor(value: NumpyArrayValue) -> TensorValue:
    """The graph output behind an array (its own source is the ndarray, not a tensor)."""
    return TensorValue(value.node, value.example)


class NumpyMethodValue(Value):
    """`array.method` before it is called."""

    def __init__(self, array: NumpyArrayValue, name: str) -> None:
        self.array = array
        self.name = name

    def python_type(self) -> type:
        return type(numpy.ndarray.sum)

    def call(self, tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        name = self.name
        if name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
            raise GraphBreak("data-dependent-op", f"ndarray.{name}() reads the array's values into Python")
        if name == "__len__":
            return ConstantValue(len(self.array.example))
        return record_numpy_call(tx, name, [self.array, *args], kwargs, name)

    def __repr__(self) -> str:
        return f"NumpyMethodValue({self.array!r}.{self.name})"


# -- recording -----------------------------------------------------------------------------
def involves_array(args: list[Value], kwargs: dict[str, Value]) -> bool:
    return any(isinstance(v, NumpyArrayValue) for v in _leaves([*args, *kwargs.values()]))


def _leaves(values: list[Value]) -> list[Value]:
    out = []
    for v in values:
        if isinstance(v, (ListValue, TupleValue)):
            out += _leaves(v.items)
        elif isinstance(v, DictValue):
            out += _leaves(list(v.items.values()))
        else:
            out.append(v)
    return out


def _template_of(tx, value: Value, nodes: list) -> Any:
    """`value` as NumpyCall's template: graph values become slots (their nodes collected)."""
    if isinstance(value, (TensorValue, SymbolicIntValue)):
        nodes.append(value.node)
        return _Slot(len(nodes) - 1)
    if isinstance(value, (ListValue, TupleValue)):
        items = [_template_of(tx, v, nodes) for v in value.items]
        return items if isinstance(value, ListValue) else tuple(items)
    if isinstance(value, SliceValue):
        return slice(*(_template_of(tx, v, nodes) for v in value.parts))
    if isinstance(value, DictValue):
        return {k: _template_of(tx, v, nodes) for k, v in value.items.items()}
    if value.is_constant():
        constant = value.constant()
        if is_ndarray(constant):
            nodes.append(tx.constant_tensor(torch.from_numpy(constant.copy())).node)
            return _Slot(len(nodes) - 1)
        return _template_constant(constant)
    raise GraphBreak("graph-argument", f"{value!r} cannot be passed to a NumPy operation")


def record_numpy_call(tx, function: Callable | str, args: list[Value], kwargs: dict[str, Value],
                      name: str) -> Value:
    """Put `function(*args, **kwargs)` under NumPy's rules into the graph; its arrays are NumpyArrayValues."""
    nodes: list = []
    template = (tuple(_template_of(tx, a, nodes) for a in args),
                {k: _template_of(tx, v, nodes) for k, v in kwargs.items()})
    # `_GraphNode` lets record_call pass the nodes through as they are
    call = NumpyCall(function, template, name)
    inputs = [_NodeValue(node) for node in nodes]
    written, tx.output.writes.written = tx.output.writes.written, set()
    try:
        result = record_call(tx, call, inputs, {})
    finally:  # what this call wrote: its node is kept even when nothing reads its result
        wrote = tx.output.writes.written
        call.mutates = bool(wrote)
        written |= wrote
        tx.output.writes.written = written
    read_only = [a for a in _leaves(args) if isinstance(a, NumpyArrayValue) and a.read_only]
    if call.mutates and any(storage_key(a.example) in wrote for a in read_only):
        _drop_node(tx, call)  # NumPy refuses the write: the program gets its error, the graph no write
        error = ValueError("assignment destination is read-only")
        raise GraphBreak("op-error", str(error), exception=error)
    if not call.mutates and not any(isinstance(v, (TensorValue, SymbolicIntValue)) for v in _leaves([result])):
        _drop_node(tx, call)  # only facts known now (np.shape, np.ndim): no graph work, as for tensors
    if name in _LIST_RESULTS and isinstance(result, TupleValue):
        result = ListValue(result.items)
    return numpy_result(tx, result, args)


_LIST_RESULTS = {"split", "array_split", "hsplit", "vsplit", "dsplit"}
"""NumPy functions that return a list of arrays (torch._numpy's return a tuple)."""


def _drop_node(tx, call: "NumpyCall") -> None:
    for node in reversed(tx.output.graph.nodes):
        if node.target is call:
            if not node.users:
                tx.output.graph.erase_node(node)
            return


class _NodeValue(TensorValue):
    """A node handed to record_call as one of a NumpyCall's inputs (a tensor, or a symbolic int)."""

    __slots__ = ()

    def __init__(self, node) -> None:
        super().__init__(node, node.meta["example_value"])


def numpy_result(tx, result: Value, args: list[Value]) -> Value:
    """What a NumPy operation returned: tensors are arrays again, torch dtypes NumPy's dtypes."""
    if isinstance(result, NumpyArrayValue):
        return result
    if isinstance(result, TensorValue):
        for a in _leaves(args):  # `out=` and in-place operators return an argument: keep its identity
            if isinstance(a, NumpyArrayValue) and a.example is result.example:
                return a
        key = storage_key(result.example)  # a view of a read-only array is read-only too
        read_only = any(isinstance(a, NumpyArrayValue) and a.read_only and storage_key(a.example) == key
                        for a in _leaves(args))
        return NumpyArrayValue(result.node, result.example, read_only=read_only)
    if isinstance(result, (ListValue, TupleValue)):
        items = [numpy_result(tx, item, args) for item in result.items]
        return ListValue(items) if isinstance(result, ListValue) else TupleValue(items, result.python_type())
    if isinstance(result, ConstantValue) and isinstance(result.value, torch.dtype):
        return ConstantValue(numpy_dtype(result.value))
    return result


# -- conversions -------------------------------------------------------------------------
_TORCH_CONVERSIONS = {torch.from_numpy: "view", torch.as_tensor: "view", torch.asarray: "view",
                      torch.tensor: "copy", torch.Tensor: "copy"}


def torch_call_on_arrays(tx, target, args: list[Value], kwargs: dict[str, Value], method: bool) -> Value:
    """record_call reached with an array among the arguments: NumPy semantics where Python has them."""
    if method:
        if isinstance(args[0], NumpyArrayValue):
            return record_numpy_call(tx, target, args, kwargs, target)
        raise GraphBreak("numpy", f"Tensor.{target} given a NumPy array",
                         "convert it with torch.from_numpy first")
    if target in _TORCH_CONVERSIONS and len(args) == 1 and isinstance(args[0], NumpyArrayValue):
        return _to_tensor(tx, target, args[0], kwargs)
    if getattr(target, "__module__", None) in ("_operator", "operator") or target is getattr:
        if any(type(a) is TensorValue for a in _leaves(args)):
            raise GraphBreak("numpy", f"{getattr(target, '__name__', target)} of a tensor and a NumPy array",
                             "convert one to the other's kind")
        return record_numpy_call(tx, target, args, kwargs, getattr(target, "__name__", "op"))
    if any(type(a) is TensorValue for a in _leaves([*args, *kwargs.values()])):
        raise GraphBreak("numpy", f"{getattr(target, '__qualname__', target)} of a tensor and a NumPy array",
                         "convert one to the other's kind")
    if target is torch.clamp and len(args) == 1 and len(kwargs) == 1:  # min(a, 3), max(a, 0)
        (bound, value), = kwargs.items()
        args, kwargs = [args[0], value], {}
        target = torch.minimum if bound == "max" else torch.maximum
    replacement = _BUILTIN_STAND_INS.get(target)
    if replacement is not None and not kwargs:
        return record_numpy_call(tx, getattr(torch_numpy(), replacement), args, kwargs, replacement)
    raise GraphBreak("numpy", f"{getattr(target, '__qualname__', target)} given a NumPy array",
                     "convert it with torch.from_numpy first")


_BUILTIN_STAND_INS = {torch.abs: "absolute", torch.minimum: "minimum", torch.maximum: "maximum"}
"""torch functions that builtins call on tensors (abs(), min() and max() of two), and their NumPy names
for arrays: the same elementwise reading the builtins get for tensors."""


def _to_tensor(tx, target, array: NumpyArrayValue, kwargs: dict[str, Value]) -> Value:
    tensor = TensorValue(array.node, array.example)
    if array.source is not None:
        tensor.source = NumpyTensorSource(array.source, array.read_only)
    if _TORCH_CONVERSIONS[target] == "copy" or kwargs:
        return record_call(tx, torch.clone if not kwargs else torch.as_tensor, [tensor], kwargs) \
            if target is not torch.Tensor else record_call(tx, torch.clone, [tensor], {})
    return tensor


def tensor_to_array(tx, tensor: TensorValue, kwargs: dict[str, Value]) -> Value:
    """`tensor.numpy(force=...)`: the same data seen as an array (a detached view in the graph)."""
    force = kwargs.pop("force", ConstantValue(False)).constant()
    if kwargs:
        raise GraphBreak("numpy", f"Tensor.numpy() given {sorted(kwargs)}")
    example = tensor.example
    if not force:
        if example.requires_grad:
            error = RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                                 "instead.")
            raise GraphBreak("op-error", str(error), exception=error)
        if example.device.type != "cpu":
            error = TypeError(f"can't convert {example.device.type} device type tensor to numpy. Use "
                              "Tensor.cpu() to copy the tensor to host memory first.")
            raise GraphBreak("op-error", str(error), exception=error)
    if example.dtype not in _NUMPY_DTYPES:
        error = TypeError(f"Got unsupported ScalarType {str(example.dtype).removeprefix('torch.').capitalize()}")
        raise GraphBreak("op-error", str(error), exception=error)
    result = record_call(tx, "detach", [tensor], {}, method=True)
    if force:
        result = record_call(tx, "cpu", [result], {}, method=True) if example.device.type != "cpu" else result
        result = record_call(tx, "resolve_conj", [result], {}, method=True)
    return NumpyArrayValue(result.node, result.example)


_NUMPY_DTYPES = {torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128, torch.int8,
                 torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool}


# -- reading arrays from outside -------------------------------------------------------------
def wrap_ndarray(tx, array, source: Source) -> Value | None:
    """An ndarray read through `source`: a graph input (guarded as the tensor viewing it), or
    None where torch cannot view it."""
    if not viewable(array):
        return None
    tx.output.guard(Guard(source, "type", numpy.ndarray))
    seen = tx.output.wrapped_by_id.get(id(array))
    if seen is not None and seen[0] is array:  # one array reached two ways (fn(a, a)): one value, as one object
        tx.output.guard(Guard(source, "same", other=seen[2]))
        return seen[1]
    read_only = not array.flags.writeable
    node, fake = tx.output.add_input(as_tensor(array), NumpyTensorSource(source, read_only))
    value = NumpyArrayValue(node, fake, source, read_only=read_only)
    tx.output.wrapped_by_id[id(array)] = (array, value, source)
    return value


def constant_array(tx, array) -> Value:
    """An ndarray made at capture time (a folded NumPy call): a constant of the graph, copied on
    each call so that the program may write to the array it gets."""
    if not viewable(array):
        raise GraphBreak("numpy", f"an array of dtype {array.dtype} has no tensor counterpart",
                         "it is made eagerly")
    tensor = tx.constant_tensor(torch.from_numpy(array.copy()))
    copy = record_call(tx, torch.clone, [tensor], {})
    return NumpyArrayValue(copy.node, copy.example)


def _register() -> None:
    hooks = tensors.NUMPY
    hooks.array_type = NumpyArrayValue
    hooks.involves_array, hooks.is_numpy_scalar = involves_array, is_numpy_scalar
    hooks.tensor_to_array, hooks.torch_call_on_arrays = tensor_to_array, torch_call_on_arrays


_register()
