"""Index simplification: views composed into div/mod chains come back to plain strides, exactly."""

import itertools
import random

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import ir
from tensorjit.codegen.simplify import simplify

i0, i1, i2 = ir.IndexVar("i0"), ir.IndexVar("i1"), ir.IndexVar("i2")
C = ir.IndexConst


def evaluate(index, values, truncating=False):
    """The index's value; truncating: with C's `/` and `%` (as the C++ and Triton emitters print
    them), where the IR's contract (ir.IndexOp: operands are non-negative) is checked too."""
    if isinstance(index, ir.IndexVar):
        return values[index.name]
    if isinstance(index, ir.IndexConst):
        return index.value
    left, right = evaluate(index.left, values, truncating), evaluate(index.right, values, truncating)
    if index.op == "add":
        return left + right
    if index.op == "mul":
        return left * right
    if truncating:
        assert left >= 0 and right > 0, f"{index.op} of {left} by {right} in {index}"
    return left // right if index.op == "floordiv" else left % right


def reshape_chain():
    flat = ir.index_add(ir.index_mul(i0, C(256)), i1)
    return ir.index_add(ir.index_add(
        ir.index_mul(ir.index_mod(ir.index_floordiv(flat, 32768), 2), C(32768)),
        ir.index_mul(ir.index_mod(ir.index_floordiv(flat, 256), 128), C(256))), ir.index_mod(flat, 256))


def test_reshape_round_trip_is_the_identity():
    assert simplify(reshape_chain(), {"i0": 256, "i1": 256}) == ir.index_add(ir.index_mul(i0, C(256)), i1)


@pytest.mark.parametrize("seed", range(20))
def test_random_index_expressions_keep_their_values(seed):
    rng = random.Random(seed)
    ranges = {"i0": rng.randint(1, 6), "i1": rng.randint(1, 6), "i2": rng.randint(1, 6)}

    def build(depth):
        if depth == 0 or rng.random() < 0.2:
            return rng.choice([i0, i1, i2, C(rng.randint(0, 7))])
        op = rng.choice(["add", "mul", "floordiv", "mod", "flip"])
        left = build(depth - 1)
        if op == "flip":  # high - left, as a flipped view indexes: non-negative, with a coefficient -1
            high = max(evaluate(left, dict(zip(ranges, values)))
                       for values in itertools.product(*(range(n) for n in ranges.values())))
            return ir.index_add(C(high + rng.randint(0, 3)), ir.index_mul(left, C(-1)))
        if op == "add":
            return ir.index_add(left, build(depth - 1))
        if op == "mul":
            return ir.index_mul(left, C(rng.randint(1, 9)))
        divisor = rng.randint(1, 12)
        return ir.index_floordiv(left, divisor) if op == "floordiv" else ir.index_mod(left, divisor)
    for _ in range(20):
        index = build(4)
        simple = simplify(index, ranges)
        for values in itertools.product(*(range(n) for n in ranges.values())):
            point = dict(zip(ranges, values))
            assert evaluate(simple, point, truncating=True) == evaluate(index, point), (index, simple, point)


def test_remainder_of_a_flip_keeps_a_non_negative_operand():
    """(124 - j) % 5 with j = (123 + i0) % 124 (a flipped slice after a concatenation, from prod's
    backward) was simplified to (4 - j) % 5, which C's `%` computes negative for j > 4: the
    kernel read before its input and every gradient of a 5x5x5 prod but six was wrong."""
    j = ir.index_mod(ir.index_add(C(123), i0), 124)
    index = ir.index_mod(ir.index_add(C(124), ir.index_mul(j, C(-1))), 5)
    simple = simplify(index, {"i0": 125})
    for value in range(125):
        assert evaluate(simple, {"i0": value}, truncating=True) == evaluate(index, {"i0": value}), (simple, value)


def test_prod_gradient_through_the_code_generator():
    """The backward of prod over all elements (cumulative products of the input shifted and flipped,
    torch's formula for inputs that may hold zeros), with values near 1 so that nothing underflows."""
    from tensorjit.backends.inductor import inductor

    x = (torch.arange(125, dtype=torch.float32).reshape(5, 5, 5) % 7 - 3) / 50 + 1
    x.requires_grad_()
    compiled = inductor(make_fx(torch.prod)(x), [x])
    output = compiled(x)
    output = output[0] if isinstance(output, (list, tuple)) else output
    expected = x.detach().clone().requires_grad_()
    torch.testing.assert_close(output, torch.prod(expected))
    torch.testing.assert_close(torch.autograd.grad(output, x)[0], torch.autograd.grad(torch.prod(expected), expected)[0])


def test_kernels_after_reshapes_index_linearly():
    from tensorjit.codegen import compile_aten_graph
    from tensorjit.codegen.decomp import decompositions

    x = torch.randn(2, 8, 16)
    fn = lambda x: (x.reshape(16, 16).t().contiguous().t().reshape(2, 8, 16) * 2).exp()  # noqa: E731
    gm = make_fx(fn, decomposition_table=decompositions())(x)
    compiled = compile_aten_graph(gm, [x])
    torch.testing.assert_close(compiled(x)[0] if isinstance(compiled(x), (list, tuple)) else compiled(x), fn(x))
    text = str(compiled.program)
    assert "//" not in text and "%" not in text, text
