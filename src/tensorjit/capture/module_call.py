"""Calling an nn.Module: forward with its forward hooks, as `nn.Module.__call__` does.

Order (the module's own hooks after the global ones registered with
`torch.nn.modules.module.register_module_forward_*_hook`):

1. pre-hooks `hook(module, args)` (or `hook(module, args, kwargs)` when registered
   with_kwargs); a result that is not None replaces the arguments (a non-tuple
   becomes a 1-tuple; a with_kwargs hook must return `(args, kwargs)`);
2. `forward(*args, **kwargs)`;
3. forward hooks `hook(module, args, result)` (or with kwargs); a result that is not
   None replaces the output.

Hooks are inlined like any Python function. The hook tables are read through their
sources, so their keys and each hook's identity are guarded: adding or removing a
hook recompiles. Backward hooks run inside the autograd engine, which capture does
not follow: a module with one breaks the graph (and raises under fullgraph=True).
"""

from __future__ import annotations

import types

import torch
import torch.nn.modules.module as module_globals
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.nn.modules.lazy import LazyModuleMixin

from .breaks import GraphBreak
from .guards import Guard
from .sources import AttrSource, ModuleGlobalSource
from .values.base import ConstantValue, Value
from .values.containers import DictValue, TupleValue
from .values.functions import FunctionValue
from .values.tensors import TensorValue

_GLOBALS = module_globals.__name__


def call_module(tx, module_value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    module = module_value.obj
    if isinstance(module, LazyModuleMixin) and module.has_uninitialized_params():
        _initialize_lazy(tx, module, args, kwargs)
    if not any_hooks(module):
        _guard_no_hooks(tx, module_value)
        return _call_forward(tx, module_value, list(args), dict(kwargs))
    if module._backward_hooks or module._backward_pre_hooks or \
            module_globals._global_backward_hooks or module_globals._global_backward_pre_hooks:
        raise GraphBreak("module-hooks", f"{type(module).__name__} has backward hooks, which run in the "
                         "autograd engine", "remove the backward hook, or call the module outside the compiled code")
    if module_value.source is not None:
        tx.output.guard(Guard(module_value.source, "no_backward_hooks"))
    tx.output.guard(Guard(None, "no_global_backward_hooks"))
    arguments: Value = TupleValue(list(args))
    keywords: Value = DictValue(dict(kwargs))
    pre_kwargs = _table(tx, module_value, "_forward_pre_hooks_with_kwargs")
    for hook_id, hook in _hooks(tx, module_value, "forward_pre_hooks"):
        if hook_id in pre_kwargs:
            result = tx.call(hook, [module_value, arguments, keywords], {})
            if not _is_none(result):
                if not (isinstance(result, TupleValue) and len(result.items) == 2):
                    error = RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                         f"but got {result!r}.")
                    raise GraphBreak("op-error", str(error), exception=error)
                arguments, keywords = result.items
        else:
            result = tx.call(hook, [module_value, arguments], {})
            if not _is_none(result):
                arguments = result if isinstance(result, TupleValue) else TupleValue([result])
    output = _call_forward(tx, module_value, tx.iterate(arguments).unpack(tx), _keywords(tx, keywords))
    with_kwargs = _table(tx, module_value, "_forward_hooks_with_kwargs")
    global_with_kwargs = _global_table(tx, "_global_forward_hooks_with_kwargs")
    for hook_id, hook in _hooks(tx, module_value, "forward_hooks"):
        if hook_id in with_kwargs or hook_id in global_with_kwargs:
            result = tx.call(hook, [module_value, arguments, keywords, output], {})
        else:
            result = tx.call(hook, [module_value, arguments, output], {})
        if not _is_none(result):
            output = result
    return output


def _initialize_lazy(tx, module, args: list[Value], kwargs: dict[str, Value]) -> None:
    """A lazy module's first call (LazyLinear, LazyConv2d, ...) sizes its parameters from the
    arguments' shapes and turns it into its plain class; that runs now, on tensors of those shapes,
    as its pre-hook would on the first eager call. Capture then traces the initialized module."""
    def concrete(value: Value):
        if isinstance(value, TensorValue):
            fake = value.example
            return torch.zeros([int(n) for n in fake.shape], dtype=fake.dtype, device=fake.device)
        if value.is_constant():
            return value.constant()
        raise GraphBreak("lazy-module", f"initializing {type(module).__name__} from {value!r}")
    with unset_fake_temporarily():
        module._infer_parameters(module, tuple(concrete(a) for a in args),
                                 {k: concrete(v) for k, v in kwargs.items()})


def any_hooks(module: torch.nn.Module) -> bool:
    """Whether calling `module` runs any hook (its own or a global one, forward or backward).
    Called on every call of a compiled module: plain attribute reads, no loop."""
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks or module_globals._global_forward_hooks
                or module_globals._global_forward_pre_hooks or module_globals._global_backward_hooks
                or module_globals._global_backward_pre_hooks)


def _guard_no_hooks(tx, module_value) -> None:
    """The common case: no hook anywhere; one check per module, one for the global tables."""
    if module_value.source is not None:
        tx.output.guard(Guard(module_value.source, "no_hooks"))
    tx.output.guard(Guard(None, "no_global_hooks"))


def _call_forward(tx, module_value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    module = module_value.obj
    forward = type(module).forward
    if "forward" in module.__dict__:
        raise GraphBreak("module-forward", f"{type(module).__name__} instance has its own forward attribute")
    if not isinstance(forward, types.FunctionType):
        raise GraphBreak("module-forward", f"{type(module).__name__}.forward is not a Python function")
    source = AttrSource(AttrSource(module_value.source, "__class__"), "forward") if module_value.source else None
    return tx.call(FunctionValue(forward, source), [module_value, *args], kwargs)


def _hooks(tx, module_value, kind: str) -> list[tuple[int, Value]]:
    """(id, hook) pairs of the global then the module's table of `kind`, read through sources."""
    pairs = []
    for table in (_global_table(tx, f"_global_{kind}"), _table(tx, module_value, f"_{kind}")):
        pairs += list(table.items())
    return pairs


def _table(tx, module_value, name: str) -> dict:
    """A hook table of the module (an OrderedDict), its keys and items guarded."""
    real = getattr(module_value.obj, name)
    source = AttrSource(module_value.source, name) if module_value.source is not None else None
    value = tx.wrap(real, source) if source is not None else tx.wrap_constant_object(real)
    return _entries(value, real)


def _global_table(tx, name: str) -> dict:
    real = getattr(module_globals, name)
    return _entries(tx.wrap(real, ModuleGlobalSource(_GLOBALS, name)), real)


def _entries(value: Value, real) -> dict:
    if isinstance(value, DictValue):
        return dict(value.items)
    if isinstance(real, dict) and not real:
        return {}
    raise GraphBreak("module-hooks", f"a hook table of type {type(real).__name__}")


def _keywords(tx, keywords: Value) -> dict[str, Value]:
    if isinstance(keywords, DictValue):
        return dict(keywords.items)
    raise GraphBreak("module-hooks", "a forward pre-hook returned keyword arguments that are not a dict")


def _is_none(value: Value) -> bool:
    return isinstance(value, ConstantValue) and value.value is None
