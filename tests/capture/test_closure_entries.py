"""A function made anew on each call of its maker (a closure) shares the compiled entries of its
code: compiling a fresh closure of code compiled already captures and compiles nothing, and its
entry reads that closure's own cells."""

import functools

import torch

import tensorjit
from conformance.harness import CountingBackend


def _adder(bias, scale):
    def add(x):
        return (x + bias) * scale
    return add


def test_a_fresh_closure_reuses_the_entry_and_reads_its_own_cells():
    backend = CountingBackend()
    x = torch.randn(4)
    for _ in range(3):
        bias = torch.randn(4)
        fn = _adder(bias, 2.0)
        torch.testing.assert_close(tensorjit.compile(fn, backend=backend)(x), (x + bias) * 2.0)
    assert backend.graph_count == 1


def test_cells_the_guards_tell_apart_compile_again():
    backend = CountingBackend()
    x = torch.randn(4)
    torch.testing.assert_close(tensorjit.compile(_adder(torch.randn(4), 2.0), backend=backend)(x).shape, x.shape)
    other = _adder(torch.randn(4), 3.0)  # another constant in a cell
    bias = other.__closure__[0].cell_contents
    torch.testing.assert_close(tensorjit.compile(other, backend=backend)(x), (x + bias) * 3.0)
    wide = _adder(torch.randn(2, 4), 2.0)  # another shape
    torch.testing.assert_close(tensorjit.compile(wide, backend=backend)(x), (x + wide.__closure__[0].cell_contents) * 2.0)
    assert backend.graph_count == 3


def _decorate(fn):
    @functools.wraps(fn)
    def wrapper(x):
        return fn(x) + 1
    return wrapper


def test_a_decorator_applied_per_call():
    backend = CountingBackend()
    x = torch.randn(3)
    results = [tensorjit.compile(_decorate(torch.sin), backend=backend)(x),
               tensorjit.compile(_decorate(torch.cos), backend=backend)(x),
               tensorjit.compile(_decorate(torch.sin), backend=backend)(x)]
    torch.testing.assert_close(results, [x.sin() + 1, x.cos() + 1, x.sin() + 1])
    assert backend.graph_count == 2  # the wrapped function is guarded: sin and cos differ


def _with_break(scale):
    def fn(x):
        y = x * scale
        print("", end="")  # a graph break
        return y + scale
    return fn


def test_a_fresh_closure_with_a_graph_break_reuses_both_graphs():
    backend = CountingBackend()
    x = torch.randn(3)
    for _ in range(3):
        scale = torch.randn(3)
        torch.testing.assert_close(tensorjit.compile(_with_break(scale), backend=backend)(x), x * scale + scale)
    assert backend.graph_count == 2


def test_closure_cells_written_by_the_entry_are_its_own():
    def counter():
        count = torch.zeros(1)

        def step(x):
            nonlocal count
            count = count + x.sum()
            return count
        return step
    backend = CountingBackend()
    first, second = counter(), counter()
    x = torch.ones(2)
    compiled_first, compiled_second = tensorjit.compile(first, backend=backend), tensorjit.compile(second, backend=backend)
    compiled_first(x)
    compiled_first(x)
    torch.testing.assert_close(compiled_second(x), torch.tensor([2.0]))
    torch.testing.assert_close(first.__closure__[0].cell_contents, torch.tensor([4.0]))
    torch.testing.assert_close(second.__closure__[0].cell_contents, torch.tensor([2.0]))
    assert backend.graph_count == 1


def test_kept_entries_hold_no_namespace():
    """What is kept for a code object holds no namespace of its functions (which would hold
    its functions, and through them the code keying what is kept, for ever)."""
    import gc
    import weakref

    class Namespace(dict):
        pass
    namespace = Namespace(torch=torch)
    exec("def make(b):\n    def add(x):\n        return x + b\n    return add\n", namespace)
    backend = CountingBackend()
    x = torch.randn(2)
    tensorjit.compile(namespace["make"](torch.randn(2)), backend=backend)(x)
    kept = weakref.ref(namespace)
    del namespace
    gc.collect()
    assert kept() is None
