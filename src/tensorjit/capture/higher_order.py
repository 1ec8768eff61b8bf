"""torch.cond and torch.utils.checkpoint.checkpoint: functions that take functions.

Takes a real callable met during capture; `higher_order_value` returns the value that gives
it meaning, or None.

- `torch.cond(pred, true_fn, false_fn, operands)`, or the operator it calls
  (`torch.ops.higher_order.cond`, called so by torch.cond's eager path, which compiles it): with a Python (or size) predicate the
  branch taken is inlined, as torch does. With a tensor predicate the call is one graph node,
  torch's `cond` operator with both branches, which the eager backend runs as it is and the
  autograd stage traces into subgraphs (with their backward). The branches must be functions
  capture can hand over as objects: module-level functions or closures over constants (a
  branch reading a tensor of the frame through its closure would not be an operand).
- `torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, ...)`: `fn` is inlined
  into the graph (one graph, as torch.compile) and its nodes are tagged `recompute`: the
  partitioner saves none of the region's values but its outputs, and recomputes the rest in
  the backward (random ops aside: those are saved, so the backward sees eager's draws). With
  torch's selective checkpointing (`create_selective_checkpoint_contexts`) the tag is the policy
  (`SelectivePolicy`), asked per ATen op by the partitioner; another `context_fn` is a break.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch.utils.checkpoint import (CheckpointPolicy, SelectiveCheckpointContext, create_selective_checkpoint_contexts,
                                    noop_context_fn)

from .breaks import GraphBreak
from .values.base import CallableConstant, ConstantValue, Value
from .values.functions import FunctionValue, NestedFunctionValue
from .values.tensors import TensorValue, wrap_result

RECOMPUTE = "recompute"  # torch's node meta key for it: make_fx copies it onto the ATen nodes traced from a node
_CHECKPOINT_OPTIONS = ("use_reentrant", "preserve_rng_state", "determinism_check", "debug")


class CondValue(CallableConstant):
    def call(self, tx, args, kwargs) -> Value:
        pred, true_fn, false_fn, operands = _cond_arguments(args, kwargs)
        items = operands.unpack(tx)
        if not isinstance(pred, TensorValue):
            branch = true_fn if pred.truth(tx) else false_fn
            return tx.call(branch, list(items), {})
        if not all(isinstance(item, TensorValue) for item in items):
            raise GraphBreak("cond", "torch.cond operands other than tensors", "pass tensors as operands")
        branches = [Branch(_real_function(tx, fn)) for fn in (true_fn, false_fn)]
        return _record_cond(tx, pred, branches, items)


class Branch(torch.nn.Module):
    """A torch.cond branch as a submodule of the graph module (its get_attr is what the node takes)."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn
        self.single = False  # the function returns one tensor (found when capture first runs it)

    def forward(self, *operands):
        # Always a tuple, as torch.cond's own wrapper flattens them: the operator's autograd wants one.
        out = self.fn(*operands)
        self.single = isinstance(out, torch.Tensor)
        return (out,) if self.single else tuple(out)


def _record_cond(tx, pred, branches: list, operands: list) -> Value:
    output = tx.output
    arguments = (pred.node, *(output.add_submodule(b, "cond_branch") for b in branches),
                 tuple(o.node for o in operands))
    try:
        with output.fake_mode:
            result = torch.ops.higher_order.cond(pred.example, *branches, tuple(o.example for o in operands))
    except Exception as error:
        raise GraphBreak("cond", f"torch.cond cannot run on fake tensors: {type(error).__name__}: {error}",
                         "it runs eagerly") from None
    node = output.create_node("call_function", torch.ops.higher_order.cond, arguments, {}, result)
    value = wrap_result(tx, node, result, [])
    return value.items[0] if branches[0].single else value


def _cond_arguments(args: list[Value], kwargs: dict[str, Value]) -> tuple:
    names = ("pred", "true_fn", "false_fn", "operands")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if set(bound) != set(names):
        raise GraphBreak("cond", "torch.cond takes pred, true_fn, false_fn and operands")
    return tuple(bound[name] for name in names)


def _real_function(tx, value: Value) -> Any:
    """The function object a branch value stands for (a new one for a closure made in the frame)."""
    if isinstance(value, FunctionValue) or isinstance(value, CallableConstant):
        return value.fn
    if isinstance(value, NestedFunctionValue):
        try:
            cells = tuple(types.CellType(_constant_of(tx, cell)) for cell in value._cells)
            defaults = tuple(d.constant() for d in value._defaults) or None
        except GraphBreak:
            raise GraphBreak("cond", "a torch.cond branch closes over a value that is not a constant",
                             "pass the tensors a branch reads as operands") from None
        return types.FunctionType(value.code, value.globals, value.name, defaults, cells or None)
    raise GraphBreak("cond", f"torch.cond branch {value!r} is not a function capture can pass to the graph")


def _constant_of(tx, cell) -> Any:
    contents = cell.load(tx) if hasattr(cell, "load") else None
    if contents is None or not contents.is_constant():
        raise GraphBreak("cond", "closure over a non-constant")
    return contents.constant()


class CheckpointValue(CallableConstant):
    def call(self, tx, args, kwargs) -> Value:
        if not args:
            raise GraphBreak("checkpoint", "checkpoint needs the function to run")
        passed = {k: v for k, v in kwargs.items() if k not in _CHECKPOINT_OPTIONS}
        tag = _checkpoint_tag(tx, passed.pop("context_fn", None))
        graph = tx.output.graph
        before = set(graph.nodes)
        result = tx.call(args[0], list(args[1:]), passed)
        for node in graph.nodes:  # the region's ops: recomputed in the backward (or as the policy says)
            if node not in before and node.op.startswith("call_"):
                node.meta[RECOMPUTE] = tag
        return result


class SelectivePolicy:
    """A selective-checkpoint policy (`create_selective_checkpoint_contexts(policy_fn or ops)`) as the
    `recompute` tag: the partitioner asks it, per ATen op of the region, whether to save the op's output."""

    def __init__(self, policy) -> None:
        self.policy = policy

    def saves(self, op, args, kwargs) -> bool:
        if isinstance(self.policy, (list, tuple, set)):
            return op in self.policy
        decision = self.policy(SelectiveCheckpointContext(is_recompute=False), op, *args, **kwargs)
        return decision in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)


def _checkpoint_tag(tx, context: Value | None):
    """True (recompute the whole region), or a SelectivePolicy for torch's selective checkpointing."""
    if context is None or context.is_constant() and context.constant() is _default_context():
        return True
    func = getattr(context, "func", None)
    arguments = getattr(context, "args", None)
    if getattr(func, "fn", None) is create_selective_checkpoint_contexts and arguments and \
            not getattr(context, "kwargs", None):
        try:
            policy = arguments[0]
            if policy.is_constant() and isinstance(policy.constant(), (list, tuple)):
                return SelectivePolicy(list(policy.constant()))
            items = getattr(policy, "items", None)
            if items is not None:
                return SelectivePolicy([item.constant() if item.is_constant() else item.fn for item in items])
            return SelectivePolicy(_real_function(tx, policy))
        except (GraphBreak, AttributeError):
            pass
    raise GraphBreak("checkpoint", "checkpoint with a context_fn other than torch's selective checkpointing",
                     "it runs eagerly")


def _default_context():
    return noop_context_fn


def higher_order_value(obj: Any, source) -> Value | None:
    """torch.cond or checkpoint (loops.py and flex_attention.py answer for the others: they
    build on this module)."""
    if obj is torch.cond or obj is torch.ops.higher_order.cond:  # the function, or the operator it calls
        return CondValue(obj, source)
    checkpoint = getattr(torch.utils, "checkpoint", None)
    if checkpoint is not None and obj is checkpoint.checkpoint:
        return CheckpointValue(obj, source)
    return None
