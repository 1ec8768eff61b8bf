"""torch's loop operators in compiled code: while_loop, scan and map, each one graph node.

Takes a call of the user-level function (`torch._higher_order_ops.while_loop`, `.scan`, `.map`,
which outside Dynamo compile themselves with torch.compile); gives a node of the operator
underneath (`torch.ops.higher_order.while_loop`, `.scan`, `.map_impl`), as Dynamo's graphs hold
them. The user's functions become submodules of the graph module (`LoopBody`), called on flat
tensors as the operators want, with the user's pytree structure rebuilt around them. The eager
backend runs the operator as it is (torch's dense implementation); the autograd stage traces it
into subgraphs as torch's own tracing rules for the operator do (while_loop's want a shape
environment in the fake run, which `autograd/joint.fake_outputs` gives).

What is not a flat tensor structure (ints carried through a while_loop, dicts) and functions that
close over tensors of the frame are graph breaks, logged; the call then runs eagerly.
"""

from __future__ import annotations

import importlib
import inspect
import operator
import sys
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from .breaks import GraphBreak
from .higher_order import _real_function
from .values.base import CallableConstant, ConstantValue, Value
from .values.containers import ListValue, TupleValue
from .values.tensors import TensorValue, record_call


class LoopBody(torch.nn.Module):
    """A function given to a loop operator, called on flat tensors; `adapt(fn, flat)` rebuilds the
    user's structure around the call and flattens what it returns (keeping its structure in `spec`)."""

    def __init__(self, fn: Callable, adapt: Callable) -> None:
        super().__init__()
        self.fn = fn
        self.adapt = adapt
        self.spec = None

    def forward(self, *flat):
        return self.adapt(self, flat)


def _structure(tx, value: Value, what: str) -> Any:
    """`value` as a Python structure whose leaves are TensorValues (tuples and lists of them)."""
    if isinstance(value, TensorValue):
        return value
    if isinstance(value, (TupleValue, ListValue)):
        items = [_structure(tx, item, what) for item in value.unpack(tx)]
        return tuple(items) if isinstance(value, TupleValue) else items
    raise GraphBreak("loop-operator", f"{what} holds {value!r}; tensorjit passes tuples and lists of tensors only",
                     "the call runs eagerly")


def _function(tx, value: Value) -> Callable:
    try:
        return _real_function(tx, value)
    except GraphBreak as error:
        raise GraphBreak("loop-operator", f"a loop operator's function: {error.reason.explanation}",
                         "pass the tensors it reads as arguments; the call runs eagerly") from None


def _constant(value: Value | None, default: Any) -> Any:
    if value is None:
        return default
    if not value.is_constant():
        raise GraphBreak("loop-operator", f"a loop operator's option is not a constant: {value!r}")
    return value.constant()


def _record(tx, op, bodies: list[LoopBody], operands: tuple, fake: Callable | None = None) -> tuple[torch.fx.Node, Any]:
    """The operator's node over `operands` (tuples or lists of TensorValues), and its fake result
    (from `fake(*bodies, *examples)` in place of the operator's own fake rule, where given)."""
    output = tx.output
    nodes = tuple(type(group)(v.node for v in group) for group in operands)
    examples = tuple(type(group)(v.example for v in group) for group in operands)
    modules = [output.add_submodule(body, "loop_body") for body in bodies]
    try:
        with output.fake_mode:
            result = (fake or op)(*bodies, *examples)
    except GraphBreak:
        raise
    except Exception as error:
        raise GraphBreak("loop-operator", f"{op} cannot run on fake tensors: {type(error).__name__}: {error}",
                         "the call runs eagerly") from None
    node = output.create_node("call_function", op, (*modules, *nodes), {}, result)
    return node, result


def _items(tx, node: torch.fx.Node, result) -> list[Value]:
    """The TensorValues of a flat tuple or list result."""
    values = []
    for index, example in enumerate(result):
        item = tx.output.create_node("call_function", operator.getitem, (node, index), {}, example)
        values.append(TensorValue(item, example))
    return values


def _rebuild(tx, leaves: list[Value], spec) -> Value:
    def build(structure):
        if isinstance(structure, tuple):
            return TupleValue([build(item) for item in structure], tuple)
        if isinstance(structure, list):
            return ListValue([build(item) for item in structure])
        return structure
    return build(pytree.tree_unflatten(leaves, spec))


def _bind(args: list[Value], kwargs: dict[str, Value], names: tuple[str, ...], what: str) -> dict[str, Value]:
    bound = dict(zip(names, args))
    for name, value in kwargs.items():
        if name in bound or name not in names:
            raise GraphBreak("loop-operator", f"{what} got an unexpected argument {name!r}")
        bound[name] = value
    return bound


class WhileLoopValue(CallableConstant):
    def call(self, tx, args, kwargs) -> Value:
        bound = _bind(args, kwargs, ("cond_fn", "body_fn", "carried_inputs"), "while_loop")
        if len(bound) != 3:
            raise GraphBreak("loop-operator", "while_loop takes cond_fn, body_fn and carried_inputs")
        carried = _structure(tx, bound["carried_inputs"], "while_loop's carried_inputs")
        leaves, spec = pytree.tree_flatten(carried)

        def condition(body, flat):
            return body.fn(*pytree.tree_unflatten(list(flat), spec))

        def step(body, flat):
            out = body.fn(*pytree.tree_unflatten(list(flat), spec))
            return tuple(pytree.tree_leaves(out))
        bodies = [LoopBody(_function(tx, bound["cond_fn"]), condition),
                  LoopBody(_function(tx, bound["body_fn"]), step)]
        fake = None if tx.output.shape_env is not None else _static_while_loop
        node, result = _record(tx, torch.ops.higher_order.while_loop, bodies, (tuple(leaves), ()), fake)
        return _rebuild(tx, _items(tx, node, result), spec)


def _static_while_loop(condition: LoopBody, body: LoopBody, carried: tuple, additional: tuple) -> tuple:
    """while_loop's result on fake tensors without a shape environment (torch's own rule wants one for
    the unbacked sizes a loop may make): the condition and one step run once, checked to keep every
    carried tensor's shape and dtype; the result has the carried tensors' metadata."""
    predicate = condition(*carried, *additional)
    if not isinstance(predicate, torch.Tensor) or predicate.numel() != 1 or predicate.dtype is not torch.bool:
        raise GraphBreak("loop-operator", "while_loop's cond_fn must return a boolean scalar tensor")
    stepped = body(*carried, *additional)
    if len(stepped) != len(carried) or any(
            a.shape != b.shape or a.dtype != b.dtype for a, b in zip(stepped, carried)):
        raise GraphBreak("loop-operator", "while_loop's body_fn changes the carried tensors' shapes or dtypes")
    return tuple(torch.empty_like(c) for c in carried)


_SCAN_LAYOUT: list[bool] = []


def _scan_puts_outputs_back_at_dim() -> bool:
    """Does the installed torch's scan stack its outputs along `dim` (2.13) or along dim 0 (2.11,
    "a stacked output along first dim")? Read from its source, which moves them back with
    `movedim(elem, 0, dim)` where it does: running it is no option (torch 2.13's eager scan
    compiles its function with Dynamo)."""
    if not _SCAN_LAYOUT:

        try:
            source = inspect.getsource(importlib.import_module("torch._higher_order_ops.scan").scan)
        except (OSError, TypeError):
            source = "movedim(elem, 0, dim)"  # no source: assume the newer behaviour
        _SCAN_LAYOUT.append("movedim(elem, 0, dim)" in source.replace(" ", "").replace(",", ", "))
    return _SCAN_LAYOUT[0]


class ScanValue(CallableConstant):
    def call(self, tx, args, kwargs) -> Value:
        bound = _bind(args, kwargs, ("combine_fn", "init", "xs", "dim", "reverse"), "scan")
        init_leaves, init_spec = pytree.tree_flatten(_structure(tx, bound["init"], "scan's init"))
        xs_leaves, xs_spec = pytree.tree_flatten(_structure(tx, bound["xs"], "scan's xs"))
        dim, reverse = _constant(bound.get("dim"), 0), _constant(bound.get("reverse"), False)
        if not init_leaves or not xs_leaves:
            raise GraphBreak("loop-operator", "scan with no init or no xs leaves", "the call runs eagerly")
        if dim < 0:
            dim += xs_leaves[0].example.dim()
        if dim != 0:
            xs_leaves = [record_call(tx, torch.movedim, [x, ConstantValue(dim), ConstantValue(0)], {})
                         for x in xs_leaves]
        if reverse:
            xs_leaves = [record_call(tx, torch.flip, [x, ConstantValue([0])], {}) for x in xs_leaves]
        count = len(init_leaves)

        def combine(body, flat):
            carry, out = body.fn(pytree.tree_unflatten(list(flat[:count]), init_spec),
                                 pytree.tree_unflatten(list(flat[count:count + len(xs_leaves)]), xs_spec))
            out_leaves, body.spec = pytree.tree_flatten(out)
            return (*pytree.tree_leaves(carry), *out_leaves)
        body = LoopBody(_function(tx, bound["combine_fn"]), combine)
        node, result = _record(tx, torch.ops.higher_order.scan, [body], (init_leaves, xs_leaves, ()))
        items = _items(tx, node, result)  # (*carry, *stacked outputs)
        carry, ys = items[:count], items[count:]
        if reverse:
            ys = [record_call(tx, torch.flip, [y, ConstantValue([0])], {}) for y in ys]
        if dim != 0 and _scan_puts_outputs_back_at_dim():
            ys = [record_call(tx, torch.movedim, [y, ConstantValue(0), ConstantValue(dim)], {})
                  if dim < y.example.dim() else y for y in ys]
        return TupleValue([_rebuild(tx, carry, init_spec), _rebuild(tx, ys, body.spec)], tuple)


class MapValue(CallableConstant):
    def call(self, tx, args, kwargs) -> Value:
        if len(args) < 2 or kwargs:
            raise GraphBreak("loop-operator", "map takes f, xs and positional arguments only")
        xs_leaves, xs_spec = pytree.tree_flatten(_structure(tx, args[1], "map's xs"))
        extra_leaves, extra_spec = pytree.tree_flatten(
            tuple(_structure(tx, a, "map's arguments") for a in args[2:]))
        count = len(xs_leaves)

        def apply(body, flat):
            out = body.fn(pytree.tree_unflatten(list(flat[:count]), xs_spec),
                          *pytree.tree_unflatten(list(flat[count:]), extra_spec))
            leaves, body.spec = pytree.tree_flatten(out)
            return tuple(leaves)
        body = LoopBody(_function(tx, args[0]), apply)
        node, result = _record(tx, torch.ops.higher_order.map_impl, [body], (xs_leaves, extra_leaves))
        return _rebuild(tx, _items(tx, node, result), body.spec)


def loop_value(obj: Any, source) -> Value | None:
    """The value of torch's user-level loop functions, or None for anything else."""
    for module, name, cls in (("while_loop", "while_loop", WhileLoopValue), ("scan", "scan", ScanValue),
                              ("map", "map", MapValue)):
        found = _user_function(module, name)
        if found is not None and obj is found:
            return cls(obj, source)
    return None


def _user_function(module: str, name: str):
    loaded = sys.modules.get(f"torch._higher_order_ops.{module}")  # not imported: the user cannot call it
    return getattr(loaded, name, None) if loaded is not None else None
