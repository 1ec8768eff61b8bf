"""@contextlib.contextmanager functions in `with` inside the compiled function: setup and teardown in the graph."""

import contextlib

import pytest
import torch

import tensorjit
from conformance.harness import CountingBackend

EVENTS = []


@contextlib.contextmanager
def no_grad_scaled(k):
    EVENTS.append("enter")
    previous = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        yield k * 2
    finally:
        torch.set_grad_enabled(previous)
        EVENTS.append("exit")


@contextlib.contextmanager
def yields_twice():
    yield 1
    yield 2


class UsesContext(torch.nn.Module):
    def forward(self, x):
        with no_grad_scaled(3) as s:
            y = x * s
        return y + 1, y.requires_grad, torch.is_grad_enabled()


def test_contextmanager_in_forward_is_one_graph():
    backend = CountingBackend()
    x = torch.randn(2, requires_grad=True)
    EVENTS.clear()
    out = tensorjit.compile(UsesContext(), backend=backend, fullgraph=True)(x)
    assert EVENTS == ["enter", "exit"]
    expected = UsesContext()(x)
    torch.testing.assert_close(out[0], expected[0])
    assert out[1:] == expected[1:] and backend.graph_count == 1


def test_an_exception_through_the_with_body_is_eager_and_correct():
    def fn(x):
        try:
            with no_grad_scaled(1):
                raise ValueError("inside")
        except ValueError:
            x = x + 1
        return x, torch.is_grad_enabled()

    x = torch.randn(2)
    out = tensorjit.compile(fn, backend="eager")(x)
    torch.testing.assert_close(out[0], x + 1)
    assert out[1] is True


def test_a_generator_that_yields_twice_raises_as_in_eager():
    def fn(x):
        with yields_twice():
            x = x + 1
        return x

    with pytest.raises(RuntimeError, match="didn't stop"):
        tensorjit.compile(fn, backend="eager")(torch.randn(2))


def test_a_graph_break_inside_the_body_gives_eager_results():
    def fn(x):
        with no_grad_scaled(2) as s:
            print("a graph break")
            y = x * s
        return y, torch.is_grad_enabled()

    x = torch.randn(2, requires_grad=True)
    out = tensorjit.compile(fn, backend="eager")(x)
    torch.testing.assert_close(out[0], x.detach() * 4)
    assert out[1] is True and not out[0].requires_grad


def test_a_break_at_a_context_manager_inside_try_runs_eagerly_without_an_internal_error():
    import warnings

    def fn(x):
        try:
            with warnings.catch_warnings():  # a skipped module: the call breaks the graph
                x = x * 2
                raise ValueError("inside")
        except ValueError:
            x = x + 1
        return x

    x = torch.randn(2)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager")(x), x * 2 + 1)


def test_contextmanager_decorated_inside_the_function():
    def fn(x):
        @contextlib.contextmanager
        def scaled(k):
            try:
                yield k + 1
            finally:
                EVENTS.append("closed")

        with scaled(2) as v:
            x = x * v
        return x

    EVENTS.clear()
    x = torch.randn(2)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(x), x * 3)
    assert EVENTS == ["closed"]


def test_a_graph_break_inside_autocast_in_a_called_function_leaves_no_autocast_behind():
    """Capture enters autocast for real (fake tensors get its dtypes); a capture that ended inside
    the block left it entered, so the graph and everything after ran under bfloat16 autocast."""
    def inner(x, y):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            z = torch.mm(x, y)
            print("a graph break")
            return torch.sin(z)

    def fn(x, y):
        return torch.mm(x, y) + inner(x, y)

    x, y = torch.rand(3, 3), torch.rand(3, 3)
    expected = fn(x, y)
    out = tensorjit.compile(fn, backend="eager")(x, y)
    assert not torch.is_autocast_enabled("cpu")
    assert out.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("make", [
    lambda f: torch.no_grad()(f), lambda f: torch.no_grad(f), lambda f: torch.enable_grad()(f),
    lambda f: torch.set_grad_enabled(False)(f), lambda f: torch.set_grad_enabled(True)(f)])
def test_grad_mode_decorating_a_function_inside_the_compiled_function(make):
    def fn(x):
        def inner(x):
            return x.sin(), torch.is_grad_enabled()

        with torch.set_grad_enabled(True):
            inner = make(inner)
            outside = torch.is_grad_enabled()  # decorating does not change the mode
        y, inside = inner(x)
        return y, y.requires_grad, inside, outside, torch.is_grad_enabled()

    x = torch.zeros(3, requires_grad=True)
    backend = CountingBackend()
    out = tensorjit.compile(fn, backend=backend, fullgraph=True)(x)
    expected = fn(x)
    torch.testing.assert_close(out[0], expected[0])
    assert out[1:] == expected[1:] and backend.graph_count == 1


@contextlib.contextmanager
def replaces_errors():
    try:
        yield
    except BaseException:
        raise ValueError("replaced")


@contextlib.contextmanager
def swallows_key_errors(log):
    try:
        yield
    except KeyError:
        log.append("swallowed")


@contextlib.contextmanager
def cleans_up(log):
    try:
        yield
    finally:
        log.append("cleanup")


def test_an_exception_leaving_the_body_is_thrown_into_the_generator_in_one_graph():
    def fn(x):
        log = []
        z = 0
        with cleans_up(log):
            try:
                with replaces_errors():
                    raise IndexError
            except ValueError as e:
                z = 1 if isinstance(e.__context__, IndexError) else 3
            except IndexError:
                z = 2
        with swallows_key_errors(log):
            {}["missing"]
        try:
            with cleans_up(log):
                raise TypeError("through")
        except TypeError as e:
            log.append(str(e))
        return x + z, log

    backend = CountingBackend()
    x = torch.randn(2)
    out, ref = tensorjit.compile(fn, backend=backend, fullgraph=True)(x), fn(x)
    torch.testing.assert_close(out[0], ref[0])
    assert out[1] == ref[1] == ["cleanup", "swallowed", "cleanup", "through"]
    assert backend.graph_count == 1
