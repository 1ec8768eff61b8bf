"""Identity of values made in the function: `id()` of one (values/builtins.py IdentityValue) is
compared by `is` while both objects live, and the immutable containers' copies and
constructors hand back the object itself, as CPython's do (`frozenset.copy`, `tuple(t)`)."""

import pytest
import torch

import tensorjit


class MyFrozenset(frozenset):
    pass


def _check(fn, *args):
    expected = fn(*args)
    got = tensorjit.compile(fn, backend="eager", fullgraph=True)(*args)
    assert got[1:] == expected[1:]
    torch.testing.assert_close(got[0], expected[0])


def test_frozenset_copy_is_the_set_itself():
    def fn(x):
        p = frozenset("abc")
        return x + 1, p.copy() is p, frozenset.copy(p) is p, frozenset(p) is p, frozenset.__new__(frozenset, p) is p

    _check(fn, torch.zeros(1))


def test_a_subclass_copy_is_a_new_plain_frozenset():
    def fn(x):
        p = MyFrozenset("abc")
        q = p.copy()
        return x + 1, type(q) is frozenset, q is p, id(q) != id(p)

    _check(fn, torch.zeros(1))


def test_tuple_of_a_tuple_is_that_tuple():
    def fn(x):
        t = (x, 1)
        return x + 1, tuple(t) is t, id(tuple(t)) == id(t), tuple.__new__(tuple, t) is t

    _check(fn, torch.zeros(1))


def test_ids_of_made_values_compare_as_identity():
    def fn(x):
        a, b = [1], [1]
        c = a
        p = frozenset("ab")
        return x + 1, id(a) == id(c), id(a) != id(b), id(a) == id(b), id(p) == id(p.copy())

    _check(fn, torch.zeros(1))


def test_ids_of_objects_that_may_be_freed_break():
    """`id([]) == id([])` is True in CPython when the first list's address is reused: unknown
    at capture, so a graph break (under fullgraph, the error) rather than a guess."""
    def fn(x):
        return x + 1, id([]) == id([])

    with pytest.raises(tensorjit.GraphBreakError):
        tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.zeros(1))


def test_the_number_itself_is_read_at_run_time():
    def fn(x):
        a = [x]
        return x + 1, id(a) > 0

    assert tensorjit.compile(fn, backend="eager")(torch.zeros(1))[1] is True


def test_a_returned_id_is_the_id_of_the_returned_object():
    def fn(x):
        a = [x]
        return x.cos(), id(a), a

    got = tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(1))
    assert got[1] == id(got[2])


def test_an_id_used_as_a_key_breaks_there_and_resumes():
    """The break comes where the number is needed (a dict key); the id left on the stack is
    rebuilt as id() of the same object, so the rest of the function still compiles."""
    from conformance.harness import CountingBackend

    def fn(x):
        a = [x]
        memo = {id(a): a}
        return x.sin(), memo[id(a)] is a

    backend = CountingBackend()
    got = tensorjit.compile(fn, backend=backend)(torch.ones(1))
    torch.testing.assert_close(got[0], torch.ones(1).sin())
    assert got[1] is True and backend.graph_count == 1


def test_ids_of_numbers_and_text_made_in_the_function_break():
    """Whether two equal ints or strings are one object is CPython's choice (small ints,
    interning): `id(a) == id(b)` of sizes read twice is True for 4 and may be False for 400."""
    def fn(x):
        a, b = x.shape[0] + 0, x.shape[0] + 0
        return x + 1, id(a) == id(b)

    for size in (4, 400):
        x = torch.zeros(size)
        with pytest.raises(tensorjit.GraphBreakError):
            tensorjit.compile(fn, backend="eager", fullgraph=True, dynamic=True)(x)
        assert tensorjit.compile(fn, backend="eager", dynamic=True)(x)[1] == fn(x)[1]
