"""The exception being handled (sys.exc_info()) while capture runs handlers: bare `raise` re-raises it,
an exception raised meanwhile gets it as __context__, `raise ... from` sets __cause__."""

import torch

import tensorjit
from tests.conformance.harness import CountingBackend


def _compiled(fn):
    backend = CountingBackend()
    return tensorjit.compile(fn, backend=backend, fullgraph=True), backend


def test_bare_raise_after_a_nested_handler_re_raises_the_handled_exception():
    def fn(x):
        try:
            try:
                1 / 0
            except ZeroDivisionError:
                for exc in (KeyError, IndexError):
                    try:
                        raise exc
                    except exc:
                        pass
                raise
        except ZeroDivisionError:
            return x + 1
        return x - 1

    x = torch.randn(3)
    opt, backend = _compiled(fn)
    torch.testing.assert_close(opt(x), fn(x))
    assert backend.graph_count == 1


def test_an_exception_raised_in_a_handler_has_the_handled_one_as_context():
    def fn(x):
        try:
            {}["missing"]
        except KeyError:
            try:
                raise ValueError("inner")
            except ValueError as e:
                return x * 2, type(e.__context__), e.__context__.args
        return x, None, None

    x = torch.randn(3)
    opt, _ = _compiled(fn)
    out, ref = opt(x), fn(x)
    torch.testing.assert_close(out[0], ref[0])
    assert out[1:] == ref[1:] == (KeyError, ("missing",))


class _Mapping:
    def __init__(self, d):
        self._d = d

    def __getitem__(self, key):
        try:
            return self._d[key]
        except KeyError:
            raise KeyError(key) from None


def test_raise_from_none_in_an_inlined_method_is_caught_by_the_caller():
    def get(obj, key, default=None):
        try:
            return obj[key]
        except KeyError as e:
            return (default, e.__cause__, e.__suppress_context__, e.args)

    def fn(x, d, key):
        return torch.sin(x + 1), get(d, key)

    x, d = torch.randn(2, 3), _Mapping({"a": 10})
    opt, backend = _compiled(fn)
    out, ref = opt(x, d, "m"), fn(x, d, "m")
    torch.testing.assert_close(out[0], ref[0])
    assert out[1] == ref[1] == (None, None, True, ("m",))
    assert opt(x, d, "a")[1] == 10
    assert backend.graph_count == 2


def test_raise_from_a_cause_sets_cause():
    def fn(x):
        try:
            try:
                raise TypeError("first")
            except TypeError as t:
                raise ValueError("second") from t
        except ValueError as v:
            return x + 1, type(v.__cause__), v.__cause__.args, v.__suppress_context__

    x = torch.randn(2)
    opt, _ = _compiled(fn)
    out, ref = opt(x), fn(x)
    torch.testing.assert_close(out[0], ref[0])
    assert out[1:] == ref[1:] == (TypeError, ("first",), True)


class _Ordered:
    def __init__(self, n):
        self.n = n

    def __le__(self, other):
        if not isinstance(other, _Ordered):
            return NotImplemented
        return self.n <= other.n


def test_an_ordering_no_side_answers_raises_typeerror_the_program_catches():
    def fn(x, a):
        try:
            a <= 1
        except TypeError as e:
            return x + 1, str(e)
        return x, ""

    x = torch.randn(2)
    opt, backend = _compiled(fn)
    out, ref = opt(x, _Ordered(1)), fn(x, _Ordered(1))
    torch.testing.assert_close(out[0], ref[0])
    assert out[1] == ref[1] == "'<=' not supported between instances of '_Ordered' and 'int'"
