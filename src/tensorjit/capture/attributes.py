"""Attribute assignment (`obj.name = value`) and deletion (`del obj.name`) in Python's order.

`type(obj).__setattr__` decides first: a Python `__setattr__` of the user's class
is inlined; `nn.Module.__setattr__` puts modules, parameters and buffers into the
module's tables (where lookup finds them only after class attributes, see
`NNModuleValue.getattr`) and sends everything else on; `object.__setattr__`
calls a data descriptor's setter (a property's `fset`) before it writes the
instance. Only that last, plain write is recorded as a side effect.
"""

from __future__ import annotations

import types

import torch

from .breaks import GraphBreak
from .sources import AttrSource
from .values.container_subclasses import container_base, routed_attribute
from .values.containers import ContainerMethodValue, DictValue, SetValue, TupleValue
from .values.base import ConstantValue, Value
from .values.functions import FunctionValue, NestedFunctionValue
from .values.objects import NNModuleValue, ObjectValue, UserObjectValue, lookup_static, made_exception
from .values.records import RecordValue
from .values.tensors import TensorValue

# Descriptors whose write is the plain write capture records (slots, C-level attributes).
_PLAIN_DESCRIPTORS = (types.MemberDescriptorType, types.GetSetDescriptorType)


def store_attribute(tx, obj: Value, name: str, value: Value, custom: bool = True) -> None:
    """`setattr(obj, name, value)`; with custom=False, `object.__setattr__(obj, name, value)`."""
    cls = _type_of(obj)
    if custom and isinstance(obj, DictValue) and routed_attribute(cls, "__setattr__"):
        tx.call(ContainerMethodValue(obj, "__setitem__"), [ConstantValue(name), value], {})
        return
    if custom and cls is not None:
        setter = lookup_static(cls, "__setattr__")[0]
        if isinstance(setter, types.FunctionType) and setter is not torch.nn.Module.__setattr__:
            tx.call(FunctionValue(setter, None), [obj, ConstantValue(name), value], {})
            return
        if isinstance(obj, NNModuleValue) and _goes_to_module_table(obj.obj, name, value):
            _store_plain(tx, obj, name, value)
            tx.output.module_table_writes.add((id(obj.obj), name))
            return
    descriptor = lookup_static(cls, name)[0] if cls is not None else None
    if isinstance(descriptor, property):
        if descriptor.fset is None:
            raise GraphBreak("attribute-error", f"property {name!r} of {cls.__name__} has no setter",
                             exception=AttributeError(name))
        tx.call(FunctionValue(descriptor.fset, None), [obj, value], {})
        return
    if hasattr(type(descriptor), "__set__") and not isinstance(descriptor, _PLAIN_DESCRIPTORS):
        setter = lookup_static(type(descriptor), "__set__")[0]
        if isinstance(setter, types.FunctionType) and isinstance(obj, ObjectValue) and not isinstance(obj, NNModuleValue):
            # a descriptor written in Python: its __set__ inlined (the descriptor is a class attribute
            # of the type the object is guarded by)
            tx.call(FunctionValue(setter, None), [tx.wrap_constant_object(descriptor), obj, value], {})
            return
        raise GraphBreak("store-attr", f"assignment to {name!r} goes through a {type(descriptor).__name__}")
    _store_plain(tx, obj, name, value)
    if isinstance(obj, NNModuleValue):
        tx.output.module_table_writes.discard((id(obj.obj), name))


def _type_of(obj: Value) -> type | None:
    try:
        return obj.python_type()
    except GraphBreak:
        return None


def _goes_to_module_table(module: torch.nn.Module, name: str, value: Value) -> bool:
    """Whether nn.Module.__setattr__ keeps `value` in _modules, _parameters or _buffers."""
    if isinstance(value, NNModuleValue) or name in module._modules or name in module._parameters:
        return True
    if isinstance(value, TensorValue):
        return value.python_type() is torch.nn.Parameter or name in module._buffers
    return name in module._buffers and value.is_constant() and value.constant() is None


def _store_plain(tx, obj: Value, name: str, value: Value) -> None:
    if name == "__class__" and not isinstance(obj, UserObjectValue):  # changes the type capture read
        raise GraphBreak("store-attr", f"assigning __class__ of {obj!r}")
    if isinstance(obj, (UserObjectValue, RecordValue, NestedFunctionValue)):
        obj.setattr(tx, name, value)
    elif isinstance(obj, (DictValue, SetValue, TupleValue)) and obj.source is None and container_base(obj.cls):
        if not hasattr(obj, "attributes"):  # a subclass instance made in the function: rebuilt with them
            obj.attributes = {}
        obj.attributes[name] = value
    elif isinstance(obj, TupleValue) and obj.source is not None and getattr(obj, "instance_attributes", None) is not None:
        tx.output.record_attribute_write(obj, name, value)  # a namedtuple subclass instance from outside
    elif isinstance(obj, ObjectValue) and (obj.source is not None or made_exception(obj)):
        tx.output.record_attribute_write(obj, name, value)
        namespace = tx.output.wrapped.get(AttrSource(obj.source, "__dict__")) if obj.source is not None else None
        if namespace is not None and isinstance(namespace[1], DictValue):  # obj.__dict__ read before: it sees the write
            namespace[1].mutate(tx)
            namespace[1].items[name] = value
    elif isinstance(obj, TensorValue) and name == "data":
        _swap_data(tx, obj, value)
    elif isinstance(obj, TensorValue) and (lookup_static(obj.python_type(), name)[1] is None or
                                           name == "grad" and _fits_as_grad(obj, value)):
        # an attribute of the tensor's own __dict__ (x.tag = ...), or its .grad: written on the
        # run-time tensor after the graph; later reads in capture find it in the overlay
        tx.output.record_attribute_write(obj, name, value)
    else:
        raise GraphBreak("store-attr", f"setting attribute {name!r} on {obj!r}")


def _swap_data(tx, tensor: TensorValue, value: Value) -> None:
    """`x.data = y`: from here on `x` holds `y`'s storage, without `y`'s autograd history. In the
    graph `x` becomes `y.detach()`; on a tensor from outside the swap is replayed after the graph.
    A tensor that requires grad would stay a leaf over the new data: not modelled, a break."""
    if not isinstance(value, TensorValue) or tensor.example.requires_grad:
        raise GraphBreak("store-attr", "Tensor.data = ... of a tensor that requires grad, or not with a tensor")
    mine, theirs = tensor.example, value.example
    if (mine.dtype, mine.device) != (theirs.dtype, theirs.device) or type(mine) is not type(theirs):
        raise GraphBreak("store-attr", "Tensor.data = ... with a tensor of another dtype or device")
    detached = tx.call(value.getattr(tx, "detach"), [], {})
    if tensor.source is not None:
        tx.output.record_attribute_write(tensor, "data", value)
    tensor.node, tensor.example = detached.node, detached.example


def _fits_as_grad(tensor: TensorValue, value: Value) -> bool:
    """Whether `tensor.grad = value` is accepted (the setter checks these; a refused one breaks, so
    eager raises its error where the program made it)."""
    if value.is_constant() and value.constant() is None:
        return True
    if not isinstance(value, TensorValue):
        return False
    mine, theirs = tensor.example, value.example
    return (mine.shape, mine.dtype, mine.device) == (theirs.shape, theirs.dtype, theirs.device)


def delete_attribute(tx, obj: Value, name: str, custom: bool = True) -> None:
    """`delattr(obj, name)`; with custom=False, `object.__delattr__(obj, name)`. A Python
    `__delattr__` of the user's class is inlined, a property's deleter called; the plain
    deletion removes an attribute of an object made in the function, or is replayed after
    the graph on an object from outside (whose later reads in capture raise AttributeError)."""
    cls = _type_of(obj)
    if custom and isinstance(obj, DictValue) and routed_attribute(cls, "__delattr__"):
        tx.call(ContainerMethodValue(obj, "__delitem__"), [ConstantValue(name)], {})
        return
    if custom and cls is not None:
        deleter = lookup_static(cls, "__delattr__")[0]
        if isinstance(deleter, types.FunctionType):
            tx.call(FunctionValue(deleter, None), [obj, ConstantValue(name)], {})
            return
    descriptor = lookup_static(cls, name)[0] if cls is not None else None
    if isinstance(descriptor, property):
        if descriptor.fdel is None:
            raise GraphBreak("attribute-error", f"property {name!r} of {cls.__name__} has no deleter",
                             exception=AttributeError(name))
        tx.call(FunctionValue(descriptor.fdel, None), [obj], {})
        return
    if hasattr(type(descriptor), "__delete__") and not isinstance(descriptor, _PLAIN_DESCRIPTORS):
        raise GraphBreak("store-attr", f"deletion of {name!r} goes through a {type(descriptor).__name__}")
    if isinstance(obj, UserObjectValue):
        obj.delattr(tx, name)
    elif type(obj) is ObjectValue and obj.source is not None and hasattr(obj.obj, "__dict__"):
        if (id(obj.obj), name) not in tx.output.attribute_overlay and name not in obj.obj.__dict__:
            raise GraphBreak("store-attr", f"deleting {name!r}, which {obj!r} does not hold itself")
        obj.getattr(tx, name)  # guards that it is there; AttributeError where deleted already
        tx.output.record_attribute_delete(obj, name)
    else:
        raise GraphBreak("store-attr", f"deleting attribute {name!r} of {obj!r}")
