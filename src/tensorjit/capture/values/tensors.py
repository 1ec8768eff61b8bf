"""Tensors in the graph, and calls that put operations into it.

`TensorValue` stands for a tensor whose value exists only at run time: it
carries the FX node that produces it and a fake tensor with its metadata.
`record_call` is the single place where a torch function or Tensor method
becomes a graph node: it runs the operation on fake tensors to learn the
result's metadata, then wraps the result (tensors become new `TensorValue`s,
anything else is a compile-time constant).
"""

from __future__ import annotations

import contextlib
import inspect
import operator
import types
from typing import Any, Callable

import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch.utils import _pytree as pytree

from ..breaks import GraphBreak
from ..dynamic import symbolic_shapes
from ..guards import Guard
from ..sources import AttrSource
from .base import DELETED, ConstantValue, Value
from .containers import KEYED_BY_IDENTITY, DictValue, ListValue, SliceValue, TupleValue
from .hooks import register_tensor_hook

# Tensor methods whose result feeds Python with data: they end the graph.
_DATA_DEPENDENT_METHODS = {
    "item": "Tensor.item() reads a tensor's value into Python",
    "tolist": "Tensor.tolist() reads a tensor's values into Python",
    "__bool__": "bool() of a tensor depends on its value",
    "__int__": "int() of a tensor depends on its value",
    "__float__": "float() of a tensor depends on its value",
    "__index__": "using a tensor as an index depends on its value",
    "backward": "Tensor.backward() runs the autograd engine",
    "data_ptr": "Tensor.data_ptr() is a run-time address",
    "register_hook": "tensor hooks run arbitrary Python",
    "nonzero": "nonzero() has a data-dependent shape",
    "unique": "unique() has a data-dependent shape",
    "cpu": None, "cuda": None,
}
CAPTURE_SCALAR_HINT = ("set tensorjit.config.config.capture_scalar_outputs = True, or pass "
                       "options={'capture_scalar_outputs': True}, to include .item() in the graph")
_DATA_DEPENDENT_HINTS = {"item": CAPTURE_SCALAR_HINT}
_DATA_DEPENDENT_FUNCTIONS = {torch.nonzero, torch.unique, torch.masked_select, torch.Tensor.nonzero,
                             torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.masked_select,
                             torch.argwhere, torch.bincount}

# Metadata that is known at capture time (shapes are static, and guarded).
_METADATA_ATTRIBUTES = {
    "shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_sparse", "layout",
    "is_leaf", "is_quantized", "is_meta", "is_nested", "names", "itemsize", "nbytes", "is_cpu", "is_xpu",
    "is_mps", "is_mkldnn", "is_sparse_csr", "is_ipu", "is_maia", "is_mtia", "is_vulkan", "is_xla",
}
_VIEW_ATTRIBUTES = {"T": "t", "mT": "mT", "H": "H", "mH": "mH", "real": "real", "imag": "imag"}


class TensorValue(Value):
    """A tensor of the graph. `example` is a fake tensor, a stand-in Python must never see:
    the class user code sees is `python_type()` (the real input's class, or torch.Tensor)."""

    __slots__ = ("node", "example", "source", "cls")

    def __init__(self, node: torch.fx.Node, example: torch.Tensor, source=None, cls: type | None = None) -> None:
        self.node = node
        self.example = example
        self.source = source
        self.cls = cls

    def python_type(self) -> type:
        if self.cls is not None:
            return self.cls
        return torch.nn.Parameter if isinstance(self.example, torch.nn.Parameter) else torch.Tensor

    def truth(self, tx) -> bool:
        raise GraphBreak("data-dependent-branch",
                         "Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`): a branch on a "
                         "tensor's value needs its run-time value",
                         "use torch.cond to express data-dependent control flow, or make the code branchless "
                         "with torch.where")

    def unpack(self, tx) -> list[Value]:
        n = self.example.shape[0] if self.example.dim() else None
        if n is None:
            raise GraphBreak("iterate", "iteration over a 0-d tensor")
        return [record_call(tx, operator.getitem, [self, ConstantValue(i)], {}) for i in range(n)]

    def getattr(self, tx, name: str) -> Value:
        example = self.example
        if name == "shape":
            return shape_value(tx, self)
        if name in _METADATA_ATTRIBUTES:
            return ConstantValue(getattr(example, name))
        if name in _VIEW_ATTRIBUTES:
            return record_call(tx, "getattr", [self, ConstantValue(name)], {}, method=False)
        if name == "grad":
            written = tx.output.attribute_overlay.get((id(self), name))
            if written is not None:  # assigned in the function
                return written
            if self.source is not None:
                return tx.wrap(tx.read_attribute_of_source(self.source, "grad"), _attr(self.source, "grad"))
            if not example.requires_grad or example.grad_fn is None:
                # made in the function and no backward can run inside the graph: a leaf's .grad is
                # None until one runs (a graph break, after which the tensor comes from outside)
                return ConstantValue(None)
            raise GraphBreak("tensor-grad", ".grad of an intermediate tensor")
        if name in ("data",):
            return record_call(tx, "detach", [self], {}, method=True)
        if name in ("__class__",):
            return tx.wrap_constant_object(self.python_type())
        if name == "grad_fn" and not example.requires_grad:
            return ConstantValue(None)
        if not hasattr(torch.Tensor, name):
            return self.instance_attribute(tx, name)
        if not _is_method(name):  # grad_fn, _base, _version, output_nr...: facts of the run-time tensor
            raise GraphBreak("tensor-attribute", f"Tensor.{name} is known only at run time")
        return TensorMethodValue(self, name)

    def instance_attribute(self, tx, name: str) -> Value:
        """An attribute in the tensor's own `__dict__` (`x.tag = ...`): one written in the
        function, else the run-time tensor's, read through a guarded source."""
        written = tx.output.attribute_overlay.get((id(self), name))
        if written is DELETED:
            raise GraphBreak("attribute-error", f"Tensor has no attribute {name!r}", exception=AttributeError(name))
        if written is not None:
            return written
        if self.source is not None:
            tensor = tx.read_attribute_of_source(self.source, "__dict__")
            if name in tensor:
                return tx.wrap(tensor[name], _attr(self.source, name))
            tx.output.guard(Guard(self.source, "missing_attribute", name))
        raise GraphBreak("attribute-error", f"Tensor has no attribute {name!r}", exception=AttributeError(name))

    def reconstruct(self, cg) -> str:
        return cg.tensor(self)

    def __repr__(self) -> str:
        return f"TensorValue({self.node.name}, {tuple(self.example.shape)}, {self.example.dtype})"


KEYED_BY_IDENTITY.add(TensorValue)  # a tensor is a set member by identity, as Python hashes it


def _is_method(name: str) -> bool:
    """Whether Tensor.`name` is a method (not a data attribute such as grad_fn or _version)."""
    static = inspect.getattr_static(torch.Tensor, name)
    return callable(static) and not isinstance(static, (property, types.GetSetDescriptorType,
                                                        types.MemberDescriptorType))


def _attr(source, name):
    return AttrSource(source, name)


class SymbolicIntValue(Value):
    """A size that is symbolic under dynamic shapes: an int (or bool) computed in the graph.

    Using it where Python needs a concrete value (range(), an f-string, a branch)
    specializes it: torch's ShapeEnv records the guard that makes that safe."""

    __slots__ = ("node", "example")

    def __init__(self, node: torch.fx.Node, example) -> None:
        self.node = node
        self.example = example
        self.source = None

    def python_type(self) -> type:
        if isinstance(self.example, torch.SymBool):
            return bool
        return float if isinstance(self.example, torch.SymFloat) else int

    def constant(self):
        try:
            return self.python_type()(self.example)
        except symbolic_shapes().GuardOnDataDependentSymNode:
            raise _unbacked_branch(self.example) from None

    def truth(self, tx) -> bool:
        try:
            return bool(self.example)
        except symbolic_shapes().GuardOnDataDependentSymNode:
            raise _unbacked_branch(self.example) from None

    def unpack(self, tx):
        raise GraphBreak("iterate", "iterating over an int")

    def reconstruct(self, cg) -> str:
        return cg.tensor(self)

    def __repr__(self) -> str:
        return f"SymbolicIntValue({self.example})"


class LazyTextValue(ConstantValue):
    """Text formatted from symbolic sizes (`f"{x.shape}"`, `"{}".format(n)`), as Dynamo keeps it:
    the sizes are specialized (guarded to their values) only when the text is read (compared,
    returned, printed), so a log line that is never shown costs no recompile per size.

    `text` was computed from the sizes' hints, so it is what reading them would give. Code that
    runs after a graph break gets the text rebuilt from the run-time sizes (`render(*values)`),
    so carrying it across a break specializes nothing either."""

    __slots__ = ("text", "sizes", "read", "render", "values")

    def __init__(self, text: str, sizes: list[Value], render: Callable, values: list[Value]) -> None:
        self.text = text
        self.sizes = sizes
        self.read = False
        self.source = None
        self.render = render
        self.values = values

    @property
    def value(self) -> str:  # shadows ConstantValue's slot: every reader of the constant goes through here
        if not self.read:
            self.read = True
            for size in self.sizes:
                size.constant()  # installs the guard that makes `text` valid
        return self.text

    def python_type(self) -> type:
        return str

    def reconstruct(self, cg) -> str:
        if self.read:  # already specialized: the text is a constant of this entry
            return cg.constant(self.text)
        arguments = ", ".join(cg.value(v) for v in self.values)
        return f"{cg.constant(self.render)}({arguments})"

    def __repr__(self) -> str:
        return f"LazyTextValue({self.text!r})"


def lazy_text(render: Callable, values: list[Value]) -> Value | None:
    """`render(*python values)` deferred, when `values` hold symbolic sizes with hints; else None."""
    sizes: list[Value] = []
    hints = [_hint(v, sizes) for v in values]
    if not sizes or any(h is _NO_HINT for h in hints):
        return None
    try:
        text = render(*hints)
    except Exception:
        return None  # the eager path raises it where it happens
    return LazyTextValue(text, sizes, render, values) if isinstance(text, str) else None


_NO_HINT = object()


def _hint(value: Value, sizes: list) -> Any:
    """The Python value of `value` with symbolic sizes read from their hints (collected in `sizes`)."""
    if isinstance(value, SymbolicIntValue):
        hint = value.example.node.hint if isinstance(value.example, torch.SymInt) else None
        if hint is None:
            return _NO_HINT
        sizes.append(value)
        return int(hint)
    if isinstance(value, LazyTextValue):
        sizes.extend(value.sizes)
        return value.text
    if isinstance(value, (TupleValue, ListValue)):
        inner = [_hint(item, sizes) for item in value.items]
        if any(h is _NO_HINT for h in inner):
            return _NO_HINT
        cls = value.python_type()
        return cls(inner) if cls in (list, tuple, torch.Size) else _NO_HINT
    if value.is_constant():
        return value.constant()
    return _NO_HINT


def _unbacked_branch(example) -> GraphBreak:
    """A size with no hint (mark_unbacked, or computed from data) read as a Python value."""
    return GraphBreak("data-dependent-branch",
                      f"Detected data-dependent branching: {example} depends on a size with no hint "
                      "(mark_unbacked or data-dependent), whose value is known only at run time",
                      "use torch.cond, or mark the dimension with mark_dynamic instead of mark_unbacked")


def size_value(tx, tensor: "TensorValue", dim: int, method: str = "size") -> Value:
    """`tensor.size(dim)` (or `.stride(dim)`): a constant, or a graph node when symbolic."""
    size = getattr(tensor.example, method)(dim)
    if not isinstance(size, torch.SymInt):
        return ConstantValue(size)
    node = tx.output.create_node("call_method", method, (tensor.node, dim), {}, size)
    return SymbolicIntValue(node, size)


def shape_value(tx, tensor: "TensorValue", method: str = "size") -> Value:
    shape = getattr(tensor.example, method)()
    if not any(isinstance(s, torch.SymInt) for s in shape):
        return ConstantValue(torch.Size(shape) if method == "size" else tuple(shape))
    items = [size_value(tx, tensor, d, method) for d in range(len(shape))]
    return TupleValue(items, torch.Size if method == "size" else tuple)


class TensorMethodValue(Value):
    """A bound Tensor method, `x.view` before it is called."""

    def __init__(self, tensor: TensorValue, name: str) -> None:
        self.tensor = tensor
        self.name = name

    def python_type(self) -> type:
        return type(torch.Tensor.add)

    def reconstruct(self, cg) -> str:
        return f"{cg.tensor(self.tensor)}.{self.name}"

    def call(self, tx, args, kwargs) -> Value:
        name = self.name
        if name == "register_hook":
            return register_tensor_hook(tx, self.tensor, args, kwargs, TensorValue)
        if name == "__iter__" and not args and not kwargs:  # x.__iter__() is iter(x): its rows
            return tx.iterate(self.tensor)
        if name in _DATA_DEPENDENT_METHODS:
            text = _DATA_DEPENDENT_METHODS[name]
            if text is not None and not (name == "item" and tx.config.capture_scalar_outputs):
                if name == "item":
                    text = "Unsupported Tensor.item() call with capture_scalar_outputs=False: " + text
                raise GraphBreak("data-dependent-op", text, _DATA_DEPENDENT_HINTS.get(name, ""))
        if name in ("size", "stride") and not kwargs:
            if not args:
                return shape_value(tx, self.tensor, name)
            return size_value(tx, self.tensor, args[0].constant(), name)
        if name in ("numel", "nelement") and any(isinstance(s, torch.SymInt) for s in self.tensor.example.shape):
            return record_call(tx, "numel", [self.tensor], {}, method=True)
        if name in ("dim", "ndimension", "numel", "nelement", "element_size", "is_contiguous",
                    "is_floating_point", "is_complex", "stride", "storage_offset", "get_device",
                    "is_signed", "has_names"):
            result = getattr(self.tensor.example, name)(*[a.constant() for a in args],
                                                        **{k: v.constant() for k, v in kwargs.items()})
            if isinstance(result, (torch.SymInt, torch.SymBool)):  # specialize, with a shape guard
                result = bool(result) if isinstance(result, torch.SymBool) else int(result)
            return ConstantValue(result)
        if name == "numpy" and not args:
            return NUMPY.tensor_to_array(tx, self.tensor, dict(kwargs))
        if name == "type" and not args and not kwargs:
            return ConstantValue(self.tensor.example.type())
        if name in _SCALED_UPDATES and isinstance(kwargs.get("value"), TensorValue) and len(args) == 2:
            return _scaled_update(tx, self.tensor, name, args, kwargs["value"])
        return record_call(tx, name, [self.tensor, *args], kwargs, method=True)

    def __repr__(self) -> str:
        return f"TensorMethodValue({self.tensor!r}.{self.name})"


_SCALED_UPDATES = {"addcdiv": "div", "addcdiv_": "div", "addcmul": "mul", "addcmul_": "mul"}


def _scaled_update(tx, tensor: TensorValue, name: str, args: list[Value], value: TensorValue) -> Value:
    """`x.addcdiv_(a, b, value=t)` with a tensor `t` (the optimizers' step size while compiling):
    ATen reads a Scalar `value` with .item(), a data-dependent break; as Dynamo does, it is
    `x.add_(t * (a / b))`, all graph ops."""
    combined = record_call(tx, _SCALED_UPDATES[name], args, {}, method=True)
    scaled = record_call(tx, "mul", [combined, value], {}, method=True)
    update = "add_" if name.endswith("_") else "add"
    return record_call(tx, update, [tensor, scaled], {}, method=True)


# -- recording operations --------------------------------------------------------------
def to_node_argument(tx, value: Value) -> Any:
    """The FX argument for a value: a node for tensors, plain data otherwise."""
    if isinstance(value, (TensorValue, SymbolicIntValue)):
        return value.node
    if isinstance(value, (ListValue, TupleValue)):
        items = [to_node_argument(tx, v) for v in value.items]
        if value.python_type() is torch.Size:
            return torch.Size(items) if all(isinstance(i, int) for i in items) else tuple(items)
        return items if isinstance(value, ListValue) else tuple(items)
    if isinstance(value, SliceValue):
        return slice(*(to_node_argument(tx, v) for v in value.parts))
    if isinstance(value, DictValue):
        return {k: to_node_argument(tx, v) for k, v in value.items.items()}
    if value.is_constant():
        constant = value.constant()
        # a NumPy scalar is the Python number it holds, as torch reads it (FX has no text for it);
        # a Python number type given as a dtype (`x.to(float)`) is the dtype torch reads it as
        if type(constant) is type and constant in _PYTHON_DTYPES:
            return _PYTHON_DTYPES[constant]
        return constant.item() if NUMPY.is_numpy_scalar(constant) else constant
    raise GraphBreak("graph-argument", f"{value!r} cannot be passed to a graph operation")


_PYTHON_DTYPES = {float: torch.float64, int: torch.int64, bool: torch.bool, complex: torch.complex128}


def _example_of(tx, argument: Any) -> Any:
    if isinstance(argument, torch.fx.Node):
        return argument.meta["example_value"]
    if isinstance(argument, slice):  # not a pytree node: its symbolic bounds are reached here
        return slice(*(_example_of(tx, part) for part in (argument.start, argument.stop, argument.step)))
    return argument


_LEAVES = frozenset((int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout))


def _examples(tx, value: Any) -> Any:
    """`value` (node arguments) with each node replaced by its example value, as
    pytree.tree_map(_example_of) gives it: built here for the plain tuples, lists and dicts that
    node arguments are (a fifth of tree_map's cost, for every op capture records); anything else
    goes to tree_map."""
    kind = type(value)
    if kind is torch.fx.Node:
        return value.meta["example_value"]
    if kind in _LEAVES:
        return value
    if kind is tuple:
        return tuple([_examples(tx, item) for item in value])
    if kind is list:
        return [_examples(tx, item) for item in value]
    if kind is dict:
        return {key: _examples(tx, item) for key, item in value.items()}
    return pytree.tree_map(lambda a: _example_of(tx, a), value)


def record_call(tx, target: Callable | str, args: list[Value], kwargs: dict[str, Value],
                method: bool = False) -> Value:
    """Put `target(*args, **kwargs)` into the graph and return its symbolic result."""
    if any(type(a) is NUMPY.array_type for a in args) or kwargs and NUMPY.involves_array([], kwargs) or \
            any(type(a) in _SEQUENCES for a in args) and NUMPY.involves_array(args, {}):
        return NUMPY.torch_call_on_arrays(tx, target, args, kwargs, method)  # NumPy's rules, not torch's
    node_args = tuple(to_node_argument(tx, a) for a in args)
    node_kwargs = {k: to_node_argument(tx, v) for k, v in kwargs.items()}
    fake_args, fake_kwargs = _examples(tx, node_args), _examples(tx, node_kwargs)
    if target == "getattr":
        op, fn = "call_function", getattr
    elif method:
        op, fn = "call_method", None
    else:
        op, fn = "call_function", target
    try:
        # Higher-order operators (torch.cond) run their functions under torch's own rules, which
        # forbid writes to inputs; the write watch is a dispatch mode they do not pass through.
        watch = contextlib.nullcontext() if isinstance(fn, torch._ops.HigherOrderOperator) else tx.output.writes
        with tx.output.fake_mode, watch, _symbolic_dispatch(tx.output):
            if method:
                result = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
            else:
                result = fn(*fake_args, **fake_kwargs)
    except GraphBreak:
        raise
    except (torch._subclasses.fake_tensor.DataDependentOutputException,
            torch._subclasses.fake_tensor.DynamicOutputShapeException,
            symbolic_shapes().GuardOnDataDependentSymNode) as e:
        raise GraphBreak("data-dependent-op", f"{_describe(target)} has a data-dependent result ({type(e).__name__})")
    except NotImplementedError as e:
        raise GraphBreak("unsupported-op", f"{_describe(target)} cannot run on fake tensors: {e}")
    except Exception as e:
        raise GraphBreak("op-error", f"{_describe(target)} raised {type(e).__name__}: {e}",
                         "the same call fails eagerly; it runs in Python so the error is raised there")
    if tx.output.shape_env is not None and _new_unbacked_symbols(result) - tx.output.symbols.keys():
        # a new unbacked size (nonzero, item); those of mark_unbacked inputs are graph inputs
        raise GraphBreak("data-dependent-op", f"{_describe(target)} has an output shape that depends on data")
    node = tx.output.create_node(op, fn if op == "call_function" else target, node_args, node_kwargs, result)
    return wrap_result(tx, node, result, args)


def _symbolic_dispatch(output):
    """With symbolic sizes, ops run through the Python dispatcher as in Dynamo: the Python meta
    functions and decompositions keep sizes symbolic where some C++ meta functions (constant_pad_nd)
    specialize them, one recompile per size."""
    if output.shape_env is None:
        return contextlib.nullcontext()
    return enable_python_dispatcher()


def _new_unbacked_symbols(result) -> set:
    """Unbacked symbols in the tensors and symbolic numbers of `result` (a call may also return
    strings, devices...: torch 2.11's free_unbacked_symbols asserts on those)."""
    leaves = [leaf for leaf in pytree.tree_leaves(result)
              if isinstance(leaf, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool))]
    return symbolic_shapes().free_unbacked_symbols(leaves) if leaves else set()


def _describe(target) -> str:
    return target if isinstance(target, str) else getattr(target, "__qualname__", repr(target))


def wrap_result(tx, node: torch.fx.Node, result: Any, args: list[Value]) -> Value:
    if isinstance(result, torch.Tensor):
        for a in args:  # in-place ops and `out=` return an argument: keep its identity
            if isinstance(a, TensorValue) and a.example is result:
                return TensorValue(node, result, a.source, a.cls)
        return TensorValue(node, result)
    if isinstance(result, (tuple, list)) and any(isinstance(r, (torch.Tensor, torch.SymInt)) for r in result):
        items = []
        for i, r in enumerate(result):
            item_node = tx.output.create_node("call_function", operator.getitem, (node, i), {}, r)
            items.append(wrap_result(tx, item_node, r, []))
        cls = type(result)
        if isinstance(result, list):
            return ListValue(items)
        return TupleValue(items, cls if cls is not tuple else tuple)
    if isinstance(result, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        if result.node.is_constant() if hasattr(result.node, "is_constant") else False:
            return ConstantValue(result.node.pytype(result.node.expr))
        return SymbolicIntValue(node, result)
    if isinstance(result, (int, float, bool, type(None), torch.Size, torch.dtype, torch.device, str)):
        return ConstantValue(result)  # the node stays if it mutates; dead-code elimination drops the rest
    if isinstance(result, (tuple, list)):
        return ConstantValue(type(result)(result)) if isinstance(result, tuple) else ListValue(
            [ConstantValue(r) for r in result])
    raise GraphBreak("unsupported-result", f"graph operation returned {type(result).__name__}")


from .containers import ListValue as _List, TupleValue as _Tuple  # noqa: E402  (they import this module)


class _NoArrays:
    """No NumPy array value exists until values/numpy.py (a layer above: it builds on tensor
    values) registers its entry points in `NUMPY` when it is imported."""


class NumpyHooks:
    """values/numpy.py's entry points that tensor calls reach (ndarray arguments follow NumPy's
    rules; `Tensor.numpy()`; NumPy scalars as arguments), set by `register` in that module."""

    array_type: type = _NoArrays
    involves_array: Callable = staticmethod(lambda args, kwargs: False)
    is_numpy_scalar: Callable = staticmethod(lambda value: False)

    @staticmethod
    def tensor_to_array(tx, tensor, kwargs):
        raise GraphBreak("numpy", "Tensor.numpy() before NumPy support is loaded")

    torch_call_on_arrays: Callable = staticmethod(lambda *args: None)


NUMPY = NumpyHooks()

_SEQUENCES = (_List, _Tuple)
