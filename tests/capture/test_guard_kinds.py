"""The guard kinds (guard_kinds.py): every kind capture records is registered, and each describes,
emits and orders itself, and is described for guard_filter_fn."""

import ast
import pathlib

import pytest
import torch

import tensorjit
from tensorjit.capture.guard_kinds import GLOBAL_STATE, GUARD_KINDS
from tensorjit.capture.guards import Guard, GuardSet, TensorSignature
from tensorjit.capture.sources import LocalSource

from conformance.harness import CountingBackend


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.inner(x).relu()


def _keep_all(entries):
    return [True for _ in entries]


def test_guard_filter_sees_the_hook_guards_of_an_inlined_module():
    """A nested module's call records "no_hooks"/"no_global_hooks" guards (and, with a forward
    hook, "no_backward_hooks"/"no_global_backward_hooks"): each is described as a GuardEntry."""
    seen = []

    def record(entries):
        seen.extend(entry.guard_type for entry in entries)
        return _keep_all(entries)
    model = _Outer()
    compiled = tensorjit.compile(model, backend=CountingBackend(), options={"guard_filter_fn": record})
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), model(x))
    assert "NN_MODULE_HOOKS" in seen

    hooked = _Outer()
    hooked.inner.register_forward_hook(lambda module, args, output: output * 2)
    compiled = tensorjit.compile(hooked, backend=CountingBackend(), options={"guard_filter_fn": _keep_all})
    torch.testing.assert_close(compiled(x), hooked(x))


# -- the registry --------------------------------------------------------------------------------------

_CAPTURE = pathlib.Path(tensorjit.__file__).parent / "capture"
_X, _Y = LocalSource(0, "x"), LocalSource(1, "y")


def _examples() -> dict:
    """One guard of every kind, with arguments it holds for."""
    t = torch.ones(2, 3)
    dynamic = TensorSignature.of(t)
    return {
        "global_state": (Guard(None, "global_state", (GLOBAL_STATE[0][0], torch.is_grad_enabled())), (t, t)),
        "type": (Guard(_X, "type", torch.Tensor), (t, t)),
        "id": (Guard(_X, "id", t), (t, t)),
        "code": (Guard(_X, "code", _SameCode(_examples.__code__)), (_examples.__code__, t)),
        "same": (Guard(_X, "same", other=_Y), (t, t)),
        "constant": (Guard(_X, "constant", 3), (3, t)),
        "items": (Guard(_X, "items", (1, 2)), ((1, 2), t)),
        "length": (Guard(_X, "length", 2), ([1, 2], t)),
        "at_least": (Guard(_X, "at_least", 2), (5, t)),
        "missing_attribute": (Guard(_X, "missing_attribute", "nope"), (t, t)),
        "absent_key": (Guard(_X, "absent_key", "nope"), ({"a": 1}, t)),
        "keys": (Guard(_X, "keys", ("a",)), ({"a": 1}, t)),
        "set_items": (Guard(_X, "set_items", (1,)), ({1}, t)),
        "tensor": (Guard(_X, "tensor", TensorSignature.of(t)), (t, t)),
        "tensor_dynamic": (Guard(_X, "tensor_dynamic", dynamic), (torch.ones(4, 5), t)),
        "aliasing": (Guard(None, "aliasing", (((_X,), (_X, _Y)), True)), (t, torch.ones(2))),
        "expression": (Guard(None, "expression", "L[0] == 3"), (3, t)),
        "no_hooks": (Guard(_X, "no_hooks"), (torch.nn.Linear(1, 1), t)),
        "no_backward_hooks": (Guard(_X, "no_backward_hooks"), (torch.nn.Linear(1, 1), t)),
        "no_global_hooks": (Guard(None, "no_global_hooks"), (t, t)),
        "no_global_backward_hooks": (Guard(None, "no_global_backward_hooks"), (t, t)),
    }


class _SameCode:
    """Stands in for runtime/persist.SavedCode: matches one code object."""

    def __init__(self, code):
        self.code = code

    def matches(self, code) -> bool:
        return code is self.code


def test_every_registered_kind_describes_emits_and_orders_itself():
    examples = _examples()
    assert set(examples) == set(GUARD_KINDS), "a new guard kind needs an example here"
    for name, kind in GUARD_KINDS.items():
        guard, holds = examples[name]
        assert kind.name == name and isinstance(kind.order, int) and kind.torch_type.isupper()
        assert isinstance(guard.describe(), str) and guard.describe()
        guard_set = GuardSet()
        guard_set.add(guard)
        assert guard_set.build({}, None).check(holds), name


def _kinds_named_in(path: pathlib.Path) -> set:
    """The string-literal kinds of the `Guard(source, kind, ...)` and `guard_left(kind, ...)` calls
    (an iterator's guard on the items it has left) in one file."""
    kinds = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        position = {"Guard": 1, "guard_left": 0, "_guard_left": 0}.get(name)
        if position is not None and len(node.args) > position:
            kind = node.args[position]
            if isinstance(kind, ast.Constant) and isinstance(kind.value, str):
                kinds.add(kind.value)
    return kinds


def test_every_kind_capture_records_is_registered():
    used = set().union(*(_kinds_named_in(path) for path in _CAPTURE.rglob("*.py")))
    assert {"type", "tensor", "no_global_hooks", "at_least"} <= used
    assert used <= set(GUARD_KINDS)


def test_an_unknown_kind_is_refused_when_the_guard_is_made():
    with pytest.raises(ValueError, match="unknown guard kind"):
        Guard(_X, "no_such_kind")


def test_order_puts_global_and_cheap_guards_first_and_shape_guards_last():
    guards = GuardSet()
    for guard in (Guard(None, "expression", "True"), Guard(_X, "tensor", TensorSignature.of(torch.ones(1))),
                  Guard(_X, "type", torch.Tensor), Guard(None, "no_global_hooks")):
        guards.add(guard)
    assert [g.kind for g in guards.ordered()] == ["no_global_hooks", "type", "tensor", "expression"]
