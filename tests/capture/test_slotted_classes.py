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
