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


def evaluate(index, values):
    if isinstance(index, ir.IndexVar):
        return values[index.name]
    if isinstance(index, ir.IndexConst):
        return index.value
    left, right = evaluate(index.left, values), evaluate(index.right, values)
    if index.op == "add":
        return left + right
    if index.op == "mul":
        return left * right
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
        op = rng.choice(["add", "mul", "floordiv", "mod"])
        left = build(depth - 1)
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
            assert evaluate(simple, point) == evaluate(index, point), (index, simple, point)


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
