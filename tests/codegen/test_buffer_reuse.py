"""Dead temporaries hand their tensor to a later kernel output of the same layout
(memory.reuses), on both emitters: fewer allocations per call, the same results."""

import pytest
import torch

from tensorjit.codegen import ir, memory
from two_emitters import EMITTERS, on_device, compile_with


def chain(x):
    # three row-group stages whose (16, 24) temporaries die one after another
    a = (x * 0.1).exp()
    # means, not sums: cos/sin of sums up to ~50 amplified rounding ~1000x (some random inputs
    # then missed the tolerance on any compiler)
    b = (a * a.mean(0) + a.mean(1, keepdim=True)).cos()
    c = (b * b.mean(0) + b.mean(1, keepdim=True)).sin()
    return c.sum(0), c.sum(1)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_dead_temporaries_are_handed_to_later_outputs(emitter):
    [x] = on_device(emitter, (torch.randn(16, 24),))
    compiled = compile_with(emitter, chain, x)
    plan = memory.reuses(compiled.program)
    assert plan, compiled.wrapper_source
    for receiver, donor in plan.items():
        assert f"{receiver} = {donor}; del {donor}" in compiled.wrapper_source
    for got, want in zip(compiled(x), chain(x)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_buffers_an_aten_call_read_are_never_reused():
    # a view an extern made of a temporary would outlive the temporary's name
    load = ir.Load("in0", ir.IndexVar("i0"), "float32")
    buffers = (ir.Buffer("in0", "float32", (4,), (1,), "input"), ir.Buffer("buf1", "float32", (4,), (1,)),
               ir.Buffer("buf2", "float32", (4,), (1,), "extern"), ir.Buffer("buf3", "float32", (4,), (1,)))
    i0 = ir.IndexVar("i0")
    steps = (ir.Pointwise("kernel0", "buf1", (4,), load, (i0,)),
             ir.Extern("extern1", torch.ops.aten.alias.default, (ir.BufferRef("buf1"),), (), "buf2"),
             ir.Pointwise("kernel2", "buf3", (4,), ir.Load("buf2", i0, "float32"), (i0,)))
    program = ir.Program(buffers, steps, ("in0",), ("buf3",))
    assert memory.reuses(program) == {}


def through_products(x, w):
    a = (x * 0.5).exp()        # a kernel output read only by a matrix product
    b = a @ w                  # ATen result, read by the next kernel
    c = (b.tanh() @ w.t()).sin()
    return (c * 2 + 1).cos()


@pytest.mark.parametrize("emitter", EMITTERS)
def test_tensors_read_by_aten_calls_are_handed_on_after_their_last_read(emitter):
    x, w = on_device(emitter, (torch.randn(16, 24), torch.randn(24, 24)))
    compiled = compile_with(emitter, through_products, x, w)
    plan = memory.reuses(compiled.program)
    assert len(plan) >= 2, compiled.program
    torch.testing.assert_close(compiled(x, w), through_products(x, w), rtol=1e-4, atol=1e-4)


def returns_a_view(x, w):
    a = (x * 0.5).exp()
    view = a.t()               # returned: its memory must never be handed to a later kernel
    b = (a @ w).sin()
    return view, (b * 3).cos()


@pytest.mark.parametrize("emitter", EMITTERS)
def test_memory_a_returned_view_reaches_is_never_handed_on(emitter):
    x, w = on_device(emitter, (torch.randn(16, 16), torch.randn(16, 16)))
    compiled = compile_with(emitter, returns_a_view, x, w)
    for got, want in zip(compiled(x, w), returns_a_view(x, w)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_aten_views_and_in_place_ops_may_alias_their_arguments():
    view = ir.Extern("e0", torch.ops.aten.view.default, (ir.BufferRef("a"), [4]), (), "b")
    product = ir.Extern("e1", torch.ops.aten.mm.default, (ir.BufferRef("a"), ir.BufferRef("c")), (), "d")
    python_function = ir.Extern("e2", lambda t: t, (ir.BufferRef("a"),), (), "e")
    assert memory.may_alias(view) and not memory.may_alias(product) and memory.may_alias(python_function)


def epilogue(x, w, scale):
    b = x @ w                                 # an ATen result read by one kernel, at each element
    return (b * scale + 1).relu(), (x.t() @ w).t() * 2


def test_a_kernel_writes_over_the_aten_result_it_reads_element_by_element():
    """The C++ kernel after a matrix product (a convolution's batch norm) takes over the
    product's tensor (memory.reuses with in_place): one allocation less, the same values, and
    the kernel reads and writes through one pointer."""
    x, w, scale = torch.randn(24, 24), torch.randn(24, 24), torch.randn(24)
    compiled = compile_with("cpp", epilogue, x, w, scale)
    pairs = memory.in_place_pairs(compiled.program)
    assert len(pairs) == 1, compiled.program  # not the transposed read of the second product
    [(receiver, donor)] = pairs.items()
    assert f"{receiver} = {donor}; del {donor}" in compiled.wrapper_source
    kernel = next(step for step in compiled.program.steps if getattr(step, "output", None) == receiver)
    text = compiled.source[compiled.source.index(f'void {kernel.name}('):]
    text = text[:text.index("\n}\n")]
    assert donor not in text and f"{receiver}[" in text, text
    for got, want in zip(compiled(x, w, scale), epilogue(x, w, scale)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_no_kernel_writes_over_what_it_reads_at_another_element(emitter):
    def fn(x, w):
        b = x @ w
        return b + b.t(), (b.flip(0) * 2).exp(), torch.cat([b[:, 12:], b[:, :12]], 1) * 3

    # Scaled so that exp's outputs stay small: an overwrite at another element would be far off,
    # while exp(2b) of b ~ 10 turned one float32 rounding of the product into 1.4e-6 relative.
    x, w = on_device(emitter, (torch.randn(24, 24) / 4, torch.randn(24, 24)))
    compiled = compile_with(emitter, fn, x, w)
    assert memory.in_place_pairs(compiled.program) == {}, compiled.program
    for got, want in zip(compiled(x, w), fn(x, w)):
        torch.testing.assert_close(got, want)


def identity_views(x, w):
    a = x @ w.t().t()                         # a view of an input in its own layout, read by a product
    g = (x * 2) @ w
    return a, g.t().t(), g.unsqueeze(0).squeeze(0), w.t().t()


@pytest.mark.parametrize("emitter", EMITTERS)
def test_a_view_in_its_base_layout_is_the_base_itself(emitter):
    """No as_strided call for a view that is its base: the name is bound to the base, also
    where it is returned and the base is the call's own memory (once: a second such output
    stays a view, two outputs are never one object; a view of an input stays a view)."""
    x, w = on_device(emitter, (torch.randn(24, 24), torch.randn(24, 24)))
    compiled = compile_with(emitter, identity_views, x, w)
    views = [s for s in compiled.program.steps if isinstance(s, ir.Extern) and s.target.__name__ == "strided_view"]
    assert len(views) == 4, compiled.program
    bound = [line.strip() for line in compiled.wrapper_source.splitlines()
             if any(line.strip() == f"{v.output} = {v.args[0].name}" for v in views)]
    assert len(bound) == 2, compiled.wrapper_source  # the input's view for the product, one returned view
    got, want = compiled(x, w), identity_views(x, w)
    assert got[1] is not got[2] and got[3] is not w
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
        assert a.stride() == b.stride()
