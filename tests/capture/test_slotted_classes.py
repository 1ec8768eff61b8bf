"""Classes with __slots__ made inside the compiled function (user classes and torch's OrderedSet),
and the text of objects whose class writes it in Python (str, repr, f-strings, truth via __len__)."""

import torch
from torch.utils._ordered_set import OrderedSet

import tensorjit


class Point:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a

    def __repr__(self):
        return f"Point({self.a})"

    def __len__(self):
        return self.a


def test_slotted_objects_made_inside_are_captured_and_returned():
    def fn(x):
        p = Point(2)
        try:
            p.b  # an unset slot: AttributeError, caught in the graph
        except AttributeError:
            x = x + 1
        s = OrderedSet([3, 1, 2])
        s.add(0)
        s.discard(1)
        return x + len(s), f"{p} {p!r} {s}", str(p), repr(s), bool(p), bool(Point(0)), p, s, list(s)

    x = torch.zeros(2)
    expected = fn(x)
    out = tensorjit.compile(fn, fullgraph=True)(x)
    torch.testing.assert_close(out[0], expected[0])
    assert out[1:6] == expected[1:6]
    assert type(out[6]) is Point and out[6].a == 2 and not hasattr(out[6], "b")
    assert type(out[7]) is OrderedSet and list(out[7]) == list(expected[7]) and out[8] == expected[8]


def test_ordered_set_operators_follow_pythons_dunder_order():
    """`a -= b` tries __isub__ before __sub__ (OrderedSet.__sub__ uses -= on its copy: taking
    -= for __sub__ recursed), NotImplemented passes to the reflected method, and OrderedSet[T]
    (a generic alias of a Python class) is made at capture time."""
    def fn(x):
        p, q = OrderedSet("abc"), OrderedSet("bcd")
        r = OrderedSet(p)
        r |= q
        return x + 1, list(p - q), list(p | q), list(p & q), list(p ^ q), list(r), p == OrderedSet("cba"), p != q

    x = torch.zeros(1)
    expected = fn(x)
    out = tensorjit.compile(fn, fullgraph=True)(x)
    torch.testing.assert_close(out[0], expected[0])
    assert out[1:] == expected[1:]


def test_an_unhashable_key_raises_type_error_for_the_program():
    def fn(x):
        d = {}
        try:
            d[["a"]] = 1
        except TypeError:
            x = x + 1
        return x

    torch.testing.assert_close(tensorjit.compile(fn, fullgraph=True)(torch.zeros(1)), torch.ones(1))


def test_operators_answering_not_implemented_raise_type_error_for_the_program():
    class Box:
        def __init__(self, v):
            self.v = v

        def __sub__(self, other):
            if not isinstance(other, Box):
                return NotImplemented
            return Box(self.v - other.v)

        def __eq__(self, other):
            return isinstance(other, Box) and self.v == other.v

        def __ne__(self, other):
            return super().__ne__(other)  # object.__ne__: the negation of __eq__

    def fn(x):
        caught = False
        try:
            Box(1) - 5
        except TypeError:
            caught = True
        s = OrderedSet("abc")
        return x + (Box(3) - Box(1)).v, caught, Box(1) != Box(1), Box(1) != Box(2), s.pop(), list(s)

    x = torch.zeros(1)
    expected = fn(x)
    out = tensorjit.compile(fn, fullgraph=True)(x)
    torch.testing.assert_close(out[0], expected[0])
    assert out[1:] == expected[1:]


class AlwaysEqual:
    def __eq__(self, other):
        return True


class NeverEqual:
    def __eq__(self, other):
        return False


def test_list_remove_compares_with_identity_then_the_items_eq():
    def fn(x):
        p = [AlwaysEqual()]
        p.remove(NeverEqual())  # AlwaysEqual.__eq__ is asked: removed
        item = NeverEqual()
        q = [item]
        q.remove(item)  # identity first
        r = [NeverEqual()]
        try:
            r.remove(NeverEqual())
        except ValueError:
            x = x + 1
        return x, len(p), len(q), len(r)

    x = torch.zeros(1)
    expected = fn(x)
    out = tensorjit.compile(fn, fullgraph=True)(x)
    torch.testing.assert_close(out[0], expected[0])
    assert out[1:] == expected[1:]


def test_a_set_of_functions_from_outside_is_guarded_by_its_items():
    s = {torch._C._set_grad_enabled, "hello", torch.amp._exit_autocast, torch.sin}
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    @tensorjit.compile(backend=backend, fullgraph=True)
    def fn(x, s):
        return x.sin() if torch.amp._exit_autocast in s else x.cos()

    x = torch.randn(2)
    torch.testing.assert_close(fn(x, s), x.sin())
    s.remove(torch.amp._exit_autocast)
    s.add(torch._C._set_fwd_grad_enabled)
    torch.testing.assert_close(fn(x, s), x.cos())
    assert len(graphs) == 2


def test_comparisons_pass_to_the_reflected_method():
    """`{1} != OrderedSet([1])`: set.__ne__ answers NotImplemented for a Python class, so Python
    asks OrderedSet.__ne__; objects without __eq__ compare by identity."""
    def fn(x):
        s = OrderedSet([1])
        plain = Point(1)
        return x + 1, {1} != s, {1} == s, {2} != s, plain == plain, plain != Point(1)

    x = torch.zeros(1)
    expected = fn(x)
    out = tensorjit.compile(fn, fullgraph=True)(x)
    assert out[1:] == expected[1:]


def test_a_set_of_mixed_constants_from_outside_is_guarded_by_its_items():
    import math
    s = {"PyTorch", 3.3, 1j, math.nan}

    @tensorjit.compile(fullgraph=True)
    def fn(x, s):
        return x.sin() if "PyTorch" in s else x.cos()

    x = torch.randn(2)
    torch.testing.assert_close(fn(x, s), x.sin())
    s.remove("PyTorch")
    torch.testing.assert_close(fn(x, s), x.cos())
