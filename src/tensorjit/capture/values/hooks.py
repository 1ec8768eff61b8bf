"""Tensor hooks (`t.register_hook(fn)`) registered in the function.

On a tensor from outside, a hook runs during backward, after the graph; capture only has to
leave it registered as the function would have. The registration is a side effect replayed
after the graph on the run-time tensor, and the handle it returns is a value of its own:
`handle.remove()` in the function cancels the registration (the replay registers and removes,
so a handle returned or stored is the real, removed one).

On a tensor made in the function, the hook must run inside the graph's backward, on the
gradient that reaches the tensor from all its uses, those before the registration too (as
Dynamo traces it into the backward). Capture inlines the hook on a stand-in gradient, then
outlines the nodes it made into a submodule (subgraphs.py); a hook with Python-visible
side effects, or ops that are not pure, breaks the graph instead. The node that made the
tensor becomes `apply_backward_hooks(made, hooks, inputs)`: in the forward a copy of `made`
(every use of the tensor reads it), in the backward the hooks in registration order, each
given the gradient the one before returned (a hook returning None leaves it). A tensor that
shares its storage with another (a view, an in-place result) would stop sharing it: a break.
"""

from __future__ import annotations

import torch
from torch.utils.hooks import RemovableHandle

from ..aliasing import storage_key
from ..breaks import GraphBreak
from ..subgraphs import external_inputs, pure, subgraph_module, visible_effects
from .base import ConstantValue, Value


def register_tensor_hook(tx, tensor: Value, args: list[Value], kwargs: dict[str, Value], tensor_value: type) -> Value:
    """`tensor.register_hook(hook)` on a tensor that requires grad. `tensor_value` is TensorValue,
    handed down by tensors.py (which imports this module) to make the stand-in gradient."""
    if not tensor.example.requires_grad:
        raise GraphBreak("data-dependent-op", "register_hook on a tensor that does not require grad raises")
    if kwargs or len(args) != 1:
        raise GraphBreak("unsupported-call", "Tensor.register_hook takes one hook")
    if tensor.source is None:
        return _hook_in_backward(tx, tensor, args[0], tensor_value)
    handle = HookHandleValue(tensor, args[0])
    tx.output.record_hook(handle)
    return handle


class HookHandleValue(Value):
    """The RemovableHandle of a hook registered in the function (see the module docstring)."""

    def __init__(self, tensor: Value, hook: Value) -> None:
        self.tensor = tensor
        self.hook = hook
        self.removed = False
        self.source = None

    def python_type(self) -> type:
        return RemovableHandle

    def getattr(self, tx, name: str) -> Value:
        if name == "remove":
            return _Remove(lambda: setattr(self, "removed", True))
        raise GraphBreak("unsupported-call", f"RemovableHandle.{name} of a hook registered in the function")

    def reconstruct(self, cg) -> str:
        return f"{cg.helper('registered_hook')}({cg.value(self.tensor)}, {cg.value(self.hook)}, {self.removed!r})"

    def __repr__(self) -> str:
        return f"HookHandleValue({self.tensor!r})"


# -- hooks on tensors made in the function ---------------------------------------------------
class BackwardHooks(torch.autograd.Function):
    """Forward: a copy of the tensor. Backward: the hooks, in order, on its gradient."""

    @staticmethod
    def forward(ctx, tensor, hooks, inputs):
        ctx.hooks, ctx.inputs = hooks, inputs
        return tensor.clone()

    @staticmethod
    def backward(ctx, grad):
        for hook, extra in zip(ctx.hooks, ctx.inputs):
            (changed,) = hook(grad, *extra)
            grad = grad if changed is None else changed
        return grad, None, None


def apply_backward_hooks(tensor, hooks, inputs):
    """The graph node's target (a module-level function: torch.fx names it, pickle finds it)."""
    return BackwardHooks.apply(tensor, hooks, inputs)


apply_backward_hooks.autograd_function = BackwardHooks  # the autograd stage traces it under plain autograd


def _hook_in_backward(tx, tensor, hook: Value, tensor_value: type) -> Value:
    """Trace `hook` on a stand-in gradient into a submodule, and add it to the tensor's hooks."""
    output = tx.output
    graph = output.graph
    made_at = tensor.node
    if made_at.target is not apply_backward_hooks:
        _check_own_storage(graph, made_at)
    effects, before = visible_effects(output), set(graph.nodes)
    grad = _gradient_stand_in(tx, tensor, tensor_value)
    result = tx.call(hook, [grad], {})
    made = [n for n in graph.nodes if n not in before and n.op != "placeholder"]
    body = [n for n in made if n is not grad.node]
    if visible_effects(output) != effects or not all(pure(n) for n in body):
        raise GraphBreak("hook", "a hook on a tensor made in the function has side effects or writes in place",
                         "it runs eagerly")
    returned = _returned_gradient(result, tensor, tensor_value)
    inputs = [n for n in external_inputs(body) if n is not grad.node]
    order = {node: index for index, node in enumerate(graph.nodes)}
    if any(order[n] > order[made_at] for n in inputs):
        raise GraphBreak("hook", "a hook on a tensor reads tensors made after it", "it runs eagerly")
    module = None
    if returned is not None and returned is not grad.node:
        module = subgraph_module(body, [grad.node, *inputs], [returned], "BackwardHook")
    for node in reversed(made):
        graph.erase_node(node)
    if module is None:  # returns None or its argument: the hook changes nothing
        return NoHookHandleValue()
    _add_hook(output, made_at, module, inputs)
    return BackwardHookHandleValue(made_at, module)


def _check_own_storage(graph, node) -> None:
    """The copy the hooks' node makes must not stop a write from reaching another tensor: the
    tensor must not be a view, nor share the storage of a tensor made before it (an in-place
    result, a detach). Those made after it that share it are its views, and read the copy."""
    example = node.meta["example_value"]
    key = storage_key(example)
    for other in graph.nodes:
        if other is node:
            break
        value = other.meta.get("example_value")
        if isinstance(value, torch.Tensor) and storage_key(value) == key:
            raise GraphBreak("hook", "a hook on a tensor that shares the storage of another", "it runs eagerly")
    if example._is_view():
        raise GraphBreak("hook", "a hook on a view made in the function", "it runs eagerly")


def _gradient_stand_in(tx, tensor, tensor_value: type) -> Value:
    node = tx.output.graph.call_function(torch.empty_like, (tensor.node,))
    with tx.output.fake_mode:
        example = torch.empty_like(tensor.example, requires_grad=False)
    node.meta["example_value"] = example
    return tensor_value(node, example)


def _returned_gradient(result: Value, tensor, tensor_value: type) -> torch.fx.Node | None:
    if isinstance(result, ConstantValue) and result.constant() is None:
        return None
    if not isinstance(result, tensor_value):
        raise GraphBreak("hook", "a tensor hook returned something other than a tensor or None", "it runs eagerly")
    got, want = result.example, tensor.example
    if got.shape != want.shape or got.dtype != want.dtype or got.device != want.device:
        raise GraphBreak("hook", "a tensor hook returned a gradient of another shape, dtype or device")
    return result.node


def _add_hook(output, node: torch.fx.Node, module, inputs: list) -> None:
    """Turn `node` into the hooks' node, or add the hook to it."""
    graph = output.graph
    name = output.unique_name("backward_hook")
    output.submodules[name] = module
    with graph.inserting_before(node):
        attribute = graph.get_attr(name)
    attribute.meta["example_value"] = module
    if node.target is not apply_backward_hooks:
        with graph.inserting_before(node):
            made = graph.node_copy(node)
        made.meta = dict(node.meta)
        node.op, node.target = "call_function", apply_backward_hooks
        node.args, node.kwargs = (made, (), ()), {}
    made, hooks, extra = node.args
    node.args = (made, (*hooks, attribute), (*extra, tuple(inputs)))


class NoHookHandleValue(Value):
    """The handle of a hook that changes nothing: there is nothing to remove."""

    def __init__(self) -> None:
        self.source = None

    def python_type(self) -> type:
        return RemovableHandle

    def getattr(self, tx, name: str) -> Value:
        if name == "remove":
            return _Remove(lambda: None)
        raise GraphBreak("unsupported-call", f"RemovableHandle.{name} of a hook registered in the function")


class BackwardHookHandleValue(NoHookHandleValue):
    """The handle of a hook in the graph's backward: `remove()` takes it out of its node."""

    def __init__(self, node: torch.fx.Node, module) -> None:
        super().__init__()
        self.node, self.module = node, module

    def getattr(self, tx, name: str) -> Value:
        if name == "remove":
            return _Remove(self.remove)
        return super().getattr(tx, name)

    def remove(self) -> None:
        made, hooks, extra = self.node.args
        kept = [i for i, h in enumerate(hooks) if h.meta["example_value"] is not self.module]
        self.node.args = (made, tuple(hooks[i] for i in kept), tuple(extra[i] for i in kept))


class _Remove(Value):
    """`handle.remove` of a hook registered in the function: calling it runs `action`, which
    cancels the registration (replayed after the graph, or traced into its backward)."""

    def __init__(self, action) -> None:
        self.action = action
        self.source = None

    def python_type(self) -> type:
        return type(RemovableHandle.remove)

    def call(self, tx, args, kwargs) -> Value:
        if args or kwargs:
            raise GraphBreak("unsupported-call", "RemovableHandle.remove takes no arguments")
        self.action()
        return ConstantValue(None)
