"""Calls of torch functions (`TorchFunctionValue`): fold queries, manage global-state switches,
record the rest."""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from ..breaks import GraphBreak
from ..sources import AttrSource
from .base import CallableConstant, ConstantValue, Value
from .containers import ListValue, TupleValue
from .functions import _TORCH_EFFECTFUL, _TORCH_QUERIES, COMPILING_QUERIES
from .tensors import CAPTURE_SCALAR_HINT, _DATA_DEPENDENT_FUNCTIONS, TensorValue, _example_of, record_call, to_node_argument


class TorchFunctionValue(CallableConstant):
    """A torch operation: calls with symbolic tensors become graph nodes."""

    def call(self, tx, args, kwargs) -> Value:
        return call_torch_function(tx, self.fn, args, kwargs)

    def getattr(self, tx, name: str) -> Value:
        try:
            found = getattr(self.fn, name)
        except AttributeError as error:  # the program's own exception (functools.wraps catches it)
            raise GraphBreak("attribute-error", str(error), exception=error) from None
        return tx.wrap(found, AttrSource(self.source, name) if self.source else None)


def call_torch_function(tx, fn, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if fn in COMPILING_QUERIES:
        return ConstantValue(True)
    if fn in _TORCH_EFFECTFUL:
        raise GraphBreak("effectful-call", f"{fn.__qualname__} changes global state",
                         "call it outside the compiled function")
    if fn in _DATA_DEPENDENT_FUNCTIONS:
        raise GraphBreak("data-dependent-op", f"{getattr(fn, '__qualname__', fn)} has a data-dependent result",
                         CAPTURE_SCALAR_HINT if fn is torch.Tensor.item else "")
    if fn in _TORCH_QUERIES or fn is torch._C._set_grad_enabled:
        if fn is torch._C._set_grad_enabled:
            return tx.set_grad_enabled(args[0].constant())
        return _fold_query(tx, fn, args, kwargs)
    if fn in _CHECKS and args and args[0].is_constant() and isinstance(args[0].constant(), bool):
        return _constant_check(tx, fn, args, kwargs)
    if fn in (torch.Tensor.item, torch.Tensor.tolist):
        raise GraphBreak("data-dependent-op", f"{fn.__qualname__} reads a tensor's value into Python",
                         CAPTURE_SCALAR_HINT if fn is torch.Tensor.item else "")
    if fn is torch.tensor and len(args) == 1:
        made = tensor_of_items(tx, args[0], kwargs)
        if made is not None:
            return made
    return record_call(tx, fn, args, kwargs)


def tensor_of_items(tx, data: Value, kwargs: dict[str, Value]) -> Value | None:
    """torch.tensor([a, 1, b]) with 0-d tensors among the items (NumPy scalars read from arrays
    too): the items detached, made one dtype and stacked, as eager reads their values. The dtype
    is the one torch.tensor infers (it is not type promotion: [int32 tensor, 2] is int64), found by
    calling it on zeros of the items' dtypes. Other forms (nested lists, requires_grad=True, items
    on another device) return None and take the ordinary path."""
    if not isinstance(data, (ListValue, TupleValue)) or set(kwargs) - {"dtype", "device"} \
            or not all(v.is_constant() for v in kwargs.values()):
        return None
    items = data.items
    if not any(isinstance(v, TensorValue) for v in items):
        return None
    samples = []
    for v in items:
        if isinstance(v, TensorValue):
            example = v.example
            if example.dim() != 0 or example.device.type != "cpu":
                return None
            samples.append(torch.zeros((), dtype=example.dtype))
        elif v.is_constant() and type(v.constant()) in (bool, int, float):
            samples.append(v.constant())
        else:
            return None
    options = {k: v.constant() for k, v in kwargs.items()}
    dtype = torch.tensor(samples, dtype=options.get("dtype")).dtype
    parts = []
    for v in items:
        if not isinstance(v, TensorValue):
            parts.append(record_call(tx, torch.tensor, [v], {"dtype": ConstantValue(dtype)}))
            continue
        if type(v) is not TensorValue:  # an array (NumPy's scalar): its data as a tensor first
            v = record_call(tx, torch.as_tensor, [v], {})
        detached = record_call(tx, torch.Tensor.detach, [v], {})
        parts.append(record_call(tx, torch.Tensor.to, [detached], {"dtype": ConstantValue(dtype)}))
    made = record_call(tx, torch.stack, [ListValue(parts)], {})
    if options.get("device") is not None:
        made = record_call(tx, torch.Tensor.to, [made], {"device": kwargs["device"]})
    return made


# torch._check and its kin: assertions on a condition, with an optional message callable.
_CHECKS = {torch._check, torch._check_index, torch._check_value, torch._check_type,
           torch._check_not_implemented, torch._check_is_size}


def _constant_check(tx, fn, args, kwargs) -> Value:
    """A check of a condition known at capture time (static shapes): a true one does nothing, so
    its message callable is never called; a false one raises, which eager does with the message."""
    if args[0].constant():
        return ConstantValue(None)
    error = _check_error(tx, fn, args, kwargs)
    said = f" {type(error).__name__}: {error}" if error is not None else ""
    raise GraphBreak("failed-check", f"{fn.__name__} of a condition that is False raises{said}", exception=error)


def _check_error(tx, fn, args, kwargs) -> BaseException | None:
    """The exception eager raises for the failed check: the check itself run with the message its
    callable gives at capture (None where that message is not a constant: the break runs it)."""
    message = kwargs.get("message", args[1] if len(args) > 1 else None)
    text = None
    if message is not None and not (message.is_constant() and message.constant() is None):
        try:
            result = tx.call(message, [], {})
        except GraphBreak:
            return None
        if not result.is_constant():
            return None
        text = result.constant()
    try:
        fn(False, (lambda: text) if text is not None else None)
    except Exception as error:  # noqa: BLE001 - the exception the check raises is the answer
        return error
    return None


def _fold_query(tx, fn, args, kwargs) -> Value:
    node_args = [to_node_argument(tx, a) for a in args]
    node_kwargs = {k: to_node_argument(tx, v) for k, v in kwargs.items()}
    fake_args, fake_kwargs = pytree.tree_map(lambda a: _example_of(tx, a), (node_args, node_kwargs))
    return tx.wrap_constant_object(fn(*fake_args, **fake_kwargs))
