"""Unit tests of the guard generator: each guard kind passes on the same input and fails on a changed one."""

import re
import weakref

import torch

import tensorjit

from tensorjit.capture.guards import Guard, GuardSet, TensorSignature, global_state_guards
from tensorjit.capture.sources import AttrSource, ItemSource, LocalSource
from conformance.harness import CountingBackend


def build(*guards, closure=None, globals_=None):
    gs = GuardSet()
    for g in guards:
        gs.add(g)
    return gs.build(globals_ or {}, closure)


def test_tensor_guard_checks_dtype_shape_stride_and_requires_grad():
    x = torch.randn(2, 3)
    check = build(Guard(LocalSource(0, "x"), "tensor", TensorSignature.of(x)))
    assert check.check((x,))
    assert check.check((torch.randn(2, 3),))
    assert not check.check((torch.randn(2, 3, dtype=torch.float64),))
    assert not check.check((torch.randn(3, 2),))
    assert not check.check((torch.randn(3, 2).t(),))  # same shape, other strides
    assert not check.check((torch.randn(2, 3, requires_grad=True),))


def test_constant_and_type_guards():
    check = build(Guard(LocalSource(0, "n"), "constant", 3), Guard(LocalSource(1, "flag"), "constant", True))
    assert check.check((3, True))
    assert not check.check((4, True))
    assert not check.check((3.0, True))  # a float that equals 3 is another type
    assert not check.check((3, False))


def test_nested_sources_are_read_once_and_checked():
    class Box:
        def __init__(self, items):
            self.items = items

    source = ItemSource(AttrSource(LocalSource(0, "box"), "items"), 1)
    check = build(Guard(AttrSource(LocalSource(0, "box"), "items"), "length", 2), Guard(source, "constant", "b"))
    assert check.check((Box(["a", "b"]),))
    assert not check.check((Box(["a", "c"]),))
    assert check.source_text.count(".items") == 1


def test_identity_guard_holds_a_weak_reference():
    class Thing:
        pass

    thing = Thing()
    check = build(Guard(LocalSource(0, "t"), "id", thing))
    assert check.check((thing,))
    assert not check.check((Thing(),))
    ref = weakref.ref(thing)
    del thing
    assert ref() is None  # the guard did not keep it alive
    assert not check.alive()


def test_global_state_guard_follows_grad_mode():
    check = build(*global_state_guards())
    assert check.check(())
    with torch.no_grad():
        assert not check.check(())
        assert "is_grad_enabled" in build(*global_state_guards()).source_text or True


def test_failure_names_the_guard():
    check = build(Guard(LocalSource(0, "n"), "constant", 3))
    assert check.failure((5,)) == "n == 3"
    assert check.failure((3,)) is None


def test_duplicate_guards_are_emitted_once():
    g = Guard(LocalSource(0, "n"), "constant", 3)
    assert len(build(g, g).all_parts()) == 1


def test_per_guard_checks_are_built_at_the_first_failure_and_hold_no_guarded_object():
    class Thing:
        pass

    thing = Thing()
    check = build(Guard(LocalSource(0, "t"), "id", thing), Guard(LocalSource(1, "n"), "constant", 3))
    assert check.parts is None, "built at capture: three quarters of the guards' build time, mostly unused"
    assert check.failure((thing, 4)) == "n == 3"
    ref = weakref.ref(thing)
    del thing
    assert ref() is None, "the per-guard checks kept the guarded object alive"
    assert check.failure((Thing(), 3)) == "t is the same object as at capture"


TABLE_BY_CLASS = {list: 2, dict: 3}


def test_guard_on_an_item_keyed_by_a_class():
    def fn(x):
        return x * TABLE_BY_CLASS[list]

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2)
    TABLE_BY_CLASS[list] = 5
    try:
        torch.testing.assert_close(compiled(x), x * 5)
    finally:
        TABLE_BY_CLASS[list] = 2


TENSORS_BY_SIZE = {torch.Size([2]): torch.ones(2)}


def test_a_graph_input_keyed_by_a_size_is_read_through_a_constant():
    def fn(x):
        return x + TENSORS_BY_SIZE[torch.Size([2])]

    compiled = tensorjit.compile(fn, backend="eager")
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), x + 1)
    TENSORS_BY_SIZE[torch.Size([2])] = torch.zeros(2)
    try:
        torch.testing.assert_close(compiled(x), x)
    finally:
        TENSORS_BY_SIZE[torch.Size([2])] = torch.ones(2)


class DotDict(dict):
    __getattr__ = dict.get


CONFIG = DotDict({"a": 2})


def test_a_dict_whose_getattr_answers_anything_is_not_an_internal_error():
    def fn(x):
        return x * CONFIG.get("a", 3)

    x = torch.randn(2)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager")(x), x * 2)


def test_tensor_guard_strides_through_contiguity_where_that_is_exact():
    """A contiguous tensor with every size >= 2 is tested with is_contiguous(); sizes of 1 (whose
    strides is_contiguous() ignores) and other layouts keep the exact strides test."""
    x = torch.randn(2, 3)
    check = build(Guard(LocalSource(0, "x"), "tensor", TensorSignature.of(x)))
    assert "is_contiguous()" in check.source_text
    assert check.check((torch.randn(2, 3),))
    assert not check.check((torch.randn(3, 2).t(),))
    assert not check.check((torch.randn(2, 6)[:, ::2],))
    unit = torch.randn(4, 1)
    check = build(Guard(LocalSource(0, "x"), "tensor", TensorSignature.of(unit)))
    assert check.check((torch.randn(4, 1),))
    assert not check.check((torch.randn(1, 4).t(),))  # contiguous too, strides (1, 4) instead of (1, 1)
    scalar = torch.tensor(1.0)
    check = build(Guard(LocalSource(0, "x"), "tensor", TensorSignature.of(scalar)))
    assert check.check((torch.tensor(2.0),))
    assert not check.check((torch.tensor([2.0]),))


def test_a_tuple_of_constants_is_one_guard_with_the_items_types():
    padding = (1, 2)
    source = LocalSource(0, "padding")
    gs = GuardSet()
    for guard in (Guard(source, "type", tuple), Guard(source, "length", 2),
                  Guard(ItemSource(source, 0), "constant", padding[0]),
                  Guard(ItemSource(source, 1), "constant", padding[1])):
        gs.add(guard)
    check = gs.build({}, None, captured=lambda s: padding if s == source else None)
    assert "_same_items" in check.source_text and "len(" not in check.source_text
    assert check.check((padding,)) and check.check(((1, 2),))
    for other in ((1, 2.0), (True, 2), [1, 2], (1, 2, 3), (1,), (1, 3)):
        assert not check.check((other,)), other
    # An item guard missing (a guard filter dropped it): the guards stay as they were.
    gs = GuardSet()
    for guard in (Guard(source, "type", tuple), Guard(source, "length", 2), Guard(ItemSource(source, 0), "constant", 1)):
        gs.add(guard)
    check = gs.build({}, None, captured=lambda s: padding if s == source else None)
    assert "_same_items" not in check.source_text and check.check(((1, 5),))


def test_a_nan_argument_matches_its_guard():
    backend = CountingBackend()
    compiled = tensorjit.compile(lambda x, n: x * 2 + n, backend=backend)
    for _ in range(3):
        assert compiled(torch.ones(2), float("nan")).isnan().all()
    assert backend.graph_count == 1
    torch.testing.assert_close(compiled(torch.ones(2), 1.5), torch.full((2,), 3.5))


def test_deterministic_algorithms_and_tf32_are_global_state_an_entry_depends_on():
    backend = CountingBackend()
    compiled = tensorjit.compile(lambda x: x + 1, backend=backend)
    before = (torch.are_deterministic_algorithms_enabled(), torch._C._get_cublas_allow_tf32())
    try:
        compiled(torch.ones(2))
        torch.use_deterministic_algorithms(not before[0])
        compiled(torch.ones(2))
        torch._C._set_cublas_allow_tf32(not before[1])
        compiled(torch.ones(2))
        assert backend.graph_count == 3
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch._C._set_cublas_allow_tf32(before[1])
    compiled(torch.ones(2))
    assert backend.graph_count == 3


def test_an_attribute_found_missing_is_guarded_missing():
    class Config:
        def __init__(self):
            self.a = 1

    def fn(x, obj):
        if hasattr(obj, "z"):
            return x - 2
        return x * getattr(obj, "scale", 3) + obj.a + getattr(type(obj), "shift", 0)

    compiled = tensorjit.compile(fn, backend="eager")
    x = torch.ones(2)
    obj = Config()
    torch.testing.assert_close(compiled(x, obj), fn(x, obj))
    obj.scale = 5
    torch.testing.assert_close(compiled(x, obj), fn(x, obj))
    Config.shift = 10
    torch.testing.assert_close(compiled(x, obj), fn(x, obj))
    obj.z = True
    torch.testing.assert_close(compiled(x, obj), fn(x, obj))


def test_a_c_classmethod_read_from_its_class_is_guarded_by_class_and_name():
    """A C classmethod read from its class (`torch._C._FunctionBase.apply`, which is what a custom
    autograd.Function's `apply` is from torch 2.14) is bound anew at every read: an identity guard
    on it failed at every call and captured again (3 graphs for 3 calls)."""
    base = torch._C._FunctionBase

    def f(x):
        return x + 1, base.apply

    backend = CountingBackend()
    compiled = tensorjit.compile(f, backend=backend)
    for _ in range(3):
        out, method = compiled(torch.ones(2))
        torch.testing.assert_close(out, torch.full((2,), 2.0))
        assert method == base.apply
    assert backend.graph_count == 1


def test_an_object_the_check_holds_is_named_once():
    """Constant guards on three ints and two floats name `int` and `float` once each (every
    name is a parameter of the check to compile); equal values that are other objects keep
    names of their own, and each guard still checks its own item."""
    values = (3, 4, 5, 0.5, 0.25)
    guards = [Guard(ItemSource(LocalSource(0, "xs"), i), "constant", v) for i, v in enumerate(values)]
    check = build(*guards)
    header = check.source_text.splitlines()[0]
    assert len(re.findall(r"\bT\d+=", header)) == 2, header  # type(v) is T...: int and float
    assert check.check((values,))
    assert not check.check(((3, 4, 6, 0.5, 0.25),)) and not check.check(((3, 4, 5, 0.5, 0.5),))


def test_the_captured_graph_generates_its_code_once(monkeypatch):
    """The captured module's code is generated (and compiled) once, with the dead nodes already
    removed: the module generates it when made."""
    generated = []
    original = torch.fx.Graph.python_code

    def python_code(self, *args, **kwargs):
        generated.append(self)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(torch.fx.Graph, "python_code", python_code)
    counter = CountingBackend()

    def fn(x):
        unused = x.cos()  # noqa: F841 - dead: removed before the code is generated
        return x.sin() + 1
    compiled = tensorjit.compile(fn, backend=counter)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), fn(x))
    (gm,) = counter.graphs
    assert "cos" not in gm.code and len(generated) == 1
