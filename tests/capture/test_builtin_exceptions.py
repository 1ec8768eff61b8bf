"""A builtin that raises on values known at capture time raises the program's exception, not a compiler error."""

import pytest
import torch

import tensorjit


def test_value_error_of_a_builtin_reaches_the_except_clause():
    def fn(x):
        try:
            v = int("x")
        except ValueError:
            v = 3
        return x * v

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), fn(x))


def test_handled_errors_of_several_builtins_stay_in_one_graph():
    def fn(x):
        n = 0
        try:
            n = len(5)
        except TypeError:
            n = 2
        try:
            divmod(1, 0)
        except ZeroDivisionError:
            n += 1
        return x * n

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), fn(x))


def test_an_unhandled_builtin_error_is_raised_as_in_eager():
    def fn(x):
        return x * int("x")

    with pytest.raises(ValueError, match="invalid literal"):
        tensorjit.compile(fn, backend="eager")(torch.randn(3))


def test_stop_iteration_key_error_and_pep_479_reach_the_except_clauses():
    def fn(x, d):
        it = iter([1])
        next(it)
        try:
            next(it)
        except StopIteration:
            x = x + 1
        try:
            d.pop("b")
        except KeyError:
            x = x * 2

        def gen():
            yield next(iter([]))

        try:
            list(gen())
        except RuntimeError:  # StopIteration leaving a generator becomes RuntimeError
            x = x - 1
        return x

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, {"a": 1}), fn(x, {"a": 1}))


def test_list_remove_of_a_missing_item_raises_value_error():
    def fn(x):
        items = ["a", "b"]
        try:
            items.remove("z")
        except ValueError:
            x = x + 1
        return x

    x = torch.randn(3)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(x), x + 1)


def test_a_sequence_times_a_float_raises_type_error():
    def fn(x):
        items = [1, 2]
        try:
            items * 2.5
        except TypeError:
            x = x + 1
        try:
            items *= 1.5
        except TypeError:
            x = x + 1
        return x, items

    x = torch.randn(3)
    out = tensorjit.compile(fn, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(out[0], x + 2)
    assert out[1] == [1, 2]


class FieldsError(Exception):
    def __init__(self, a, b=None):
        self.a = a
        self.b = b


class CodedError(ValueError):
    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def test_exception_classes_with_a_python_init_are_made_in_the_function():
    def fn(t):
        try:
            raise FieldsError(2, b=t + 1)
        except ValueError:
            z = t
        except FieldsError as e:
            z = t + e.a + e.b
        try:
            raise CodedError("bad", 7)
        except ValueError as e:
            text = str(e) + str(e.code) + repr(e.args)
        return z, text

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    t = torch.randn(2)
    out, text = compiled(t)
    ref, ref_text = fn(t)
    torch.testing.assert_close(out, ref)
    assert text == ref_text


def test_arguments_a_builtin_refuses_are_the_programs_type_error():
    def fn(x):
        try:
            isinstance(x, torch.Tensor, invalid=True)
        except TypeError:
            return x + 1
        return x

    x = torch.zeros(2)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(x), x + 1)

    def uncaught(x):
        return isinstance(x, torch.Tensor, invalid=True)

    with pytest.raises(TypeError):
        tensorjit.compile(uncaught, backend="eager")(x)
