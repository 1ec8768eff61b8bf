"""Repeated blocks traced once (autograd/repeats.py, autograd/segments.py).

An inference graph whose blocks repeat (transformer layers) traces the first block and stamps the
others; the graph must be the one a whole trace gives, node for node, name for name, with values of
the same metadata. Where a copy cannot be proved alike (other strides, an in-place write of a block's
input, symbolic sizes), it is traced as before."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tensorjit
from tensorjit import logs
from tensorjit.autograd import aot_compile
from tensorjit.autograd.joint import REUSE, trace_forward
from tensorjit.autograd.repeats import find_repeats, metadata


class Block(torch.nn.Module):
    def __init__(self, width: int, inplace_input: bool = False, inplace_local: bool = False, p: float = 0.0):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)
        self.inplace_input, self.inplace_local, self.p = inplace_input, inplace_local, p

    def forward(self, x):
        if self.inplace_input:
            x.mul_(0.5)  # writes the value the block was given: reuse must not cross it
        h = self.up(self.norm(x))
        if self.inplace_local:
            h.add_(1.0)  # a value of the block's own: functionalized inside the block
        h = F.gelu(h, approximate="tanh")
        h = F.dropout(h, self.p, training=self.p > 0)
        return x + self.down(h)


class Stack(torch.nn.Module):
    def __init__(self, depth: int = 4, width: int = 16, **options):
        super().__init__()
        self.embed = torch.nn.Linear(8, width)
        self.blocks = torch.nn.ModuleList(Block(width, **options) for _ in range(depth))
        self.head = torch.nn.Linear(width, 3)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h).softmax(-1)


DEPTH = 12  # blocks of 6 or 7 captured nodes: the copies hold repeats.MIN_SAVED nodes or more


def _captured(model, inputs, **compile_args):
    """(captured graph, example inputs) of `model` under inference_mode."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward
    with torch.inference_mode():
        tensorjit.compile(model, backend=backend, **compile_args)(*inputs)
    return graphs[0]


def _traced(model, inputs, reuse: bool, **compile_args):
    gm, example_inputs = _captured(model, inputs, **compile_args)
    with torch.inference_mode():
        return trace_forward(gm, example_inputs, None, reuse_repeated_blocks=reuse).graph_module


def _sharing(gm: torch.fx.GraphModule) -> list:
    """For each node's tensor value, the first node whose value shares its storage."""
    first: dict[int, str] = {}
    found = []
    for node in gm.graph.nodes:
        values = node.meta.get("val")
        for value in values if isinstance(values, (tuple, list)) else (values,):
            if isinstance(value, torch.Tensor):
                found.append(first.setdefault(value.untyped_storage()._cdata, node.name))
    return found


def _assert_same_graph(a: torch.fx.GraphModule, b: torch.fx.GraphModule) -> None:
    assert a.code == b.code
    assert _sharing(a) == _sharing(b)  # views of the same values, as traced
    assert dict(a.named_buffers()).keys() == dict(b.named_buffers()).keys()
    for x, y in zip(a.graph.nodes, b.graph.nodes):
        if x.op == "get_attr":
            assert torch.equal(getattr(a, x.target), getattr(b, y.target))
        assert x.name == y.name and sorted(x.meta) == sorted(y.meta)
        vx, vy = x.meta.get("val"), y.meta.get("val")
        if isinstance(vx, torch.Tensor):
            assert metadata(vx) == metadata(vy), x.name
            assert x.meta.get("tensor_meta") == y.meta.get("tensor_meta"), x.name


def test_blocks_are_found_in_the_captured_graph():
    gm, _ = _captured(Stack(depth=DEPTH), [torch.randn(2, 8)])
    repeats = find_repeats(gm)
    assert repeats is not None and len(repeats.blocks) == DEPTH
    assert all(len(block) == repeats.length for block in repeats.blocks)
    gm, _ = _captured(Stack(depth=1), [torch.randn(2, 8)])
    assert find_repeats(gm) is None


def test_blocks_match_only_on_the_same_objects():
    """Constants are compared by value where they are plain (numbers, dtypes), else by identity: two
    equal-looking tensors or callables are not proved to trace alike."""
    from tensorjit.autograd.repeats import _constants
    refer = str
    assert _constants((1, 2.0, torch.float32, (None, slice(1, 2))), refer) == \
        _constants((1, 2.0, torch.float32, (None, slice(1, 2))), refer)
    assert _constants((1,), refer) != _constants((1.0,), refer) != _constants((True,), refer)
    a, b = torch.zeros(3), torch.zeros(3)
    assert _constants((a,), refer) == _constants((a,), refer) != _constants((b,), refer)


def test_few_repeated_nodes_are_traced_whole():
    """Three blocks of six nodes: a segment's own make_fx would cost more than stamping saves."""
    gm, _ = _captured(Stack(depth=3), [torch.randn(2, 8)])
    assert find_repeats(gm) is None


def test_stamped_blocks_give_the_whole_trace():
    model, inputs = Stack(depth=DEPTH).eval(), [torch.randn(2, 8)]
    whole, stamped = _traced(model, inputs, reuse=False), _traced(model, inputs, reuse=True)
    count = stamped.meta[REUSE]
    assert REUSE not in whole.meta
    assert (count.blocks, count.stamped_blocks) == (DEPTH, DEPTH - 1)
    assert count.stamped_nodes > count.traced_nodes > 0
    _assert_same_graph(whole, stamped)


def test_an_in_place_write_inside_a_block_is_stamped_functionalized():
    model, inputs = Stack(depth=DEPTH, inplace_local=True).eval(), [torch.randn(2, 8)]
    whole, stamped = _traced(model, inputs, reuse=False), _traced(model, inputs, reuse=True)
    assert stamped.meta[REUSE].stamped_blocks == DEPTH - 1
    _assert_same_graph(whole, stamped)


def test_an_in_place_write_of_a_block_input_is_traced_whole():
    model, inputs = Stack(depth=DEPTH, inplace_input=True).eval(), [torch.randn(2, 8)]
    stamped = _traced(model, inputs, reuse=True)
    assert REUSE not in stamped.meta
    assert f"autograd: {DEPTH} repeated blocks traced whole: in-place op aten.copy_.default" \
        in logs.recent("compile_time")
    _assert_same_graph(_traced(model, inputs, reuse=False), stamped)


def test_a_block_reading_other_strides_is_traced_not_stamped():
    model = Stack(depth=DEPTH).eval()
    with torch.no_grad():  # same sizes, another layout: block 3's weight is a transposed copy
        weight = model.blocks[2].up.weight
        model.blocks[2].up.weight = torch.nn.Parameter(weight.t().contiguous().t())
    inputs = [torch.randn(2, 8)]
    stamped = _traced(model, inputs, reuse=True)
    count = stamped.meta[REUSE]
    assert count.blocks == DEPTH and count.stamped_blocks == DEPTH - 2  # all but block 3 stamped
    _assert_same_graph(_traced(model, inputs, reuse=False), stamped)


def test_symbolic_sizes_are_traced_whole():
    model, inputs = Stack(depth=DEPTH).eval(), [torch.randn(2, 8)]
    stamped = _traced(model, inputs, reuse=True, dynamic=True)
    assert REUSE not in stamped.meta


def test_random_ops_are_stamped_as_their_own_draws():
    """make_fx records a random op with no state threaded through the graph: a stamped dropout is the
    node a whole trace records, and draws its own mask when it runs."""
    model, inputs = Stack(depth=DEPTH, p=0.5).eval(), [torch.randn(2, 8)]
    whole, stamped = _traced(model, inputs, reuse=False), _traced(model, inputs, reuse=True)
    assert stamped.meta[REUSE].stamped_blocks == DEPTH - 1
    _assert_same_graph(whole, stamped)
    randoms = [n for n in stamped.graph.nodes if n.op == "call_function"
               and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())]
    assert len(randoms) == DEPTH


class Scaled(torch.nn.Module):
    """Blocks that make a tensor constant each (`torch.tensor(2.0)`: make_fx lifts it), or that all read
    one made before them (a value of constants alone crossing the cuts)."""

    def __init__(self, shared: bool, depth: int = DEPTH):
        super().__init__()
        self.shared = shared
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(depth))

    def forward(self, x):
        shared = torch.tensor(2.0)
        for layer in self.layers:
            scale = shared if self.shared else torch.tensor([2.0]).view(1, 1)[0]
            x = torch.tanh(layer(x) * scale + 1.0).relu()
        return x


def test_constants_made_in_a_block_are_stamped_as_copies():
    model, inputs = Scaled(shared=False), [torch.randn(2, 8)]
    whole, stamped = _traced(model, inputs, reuse=False), _traced(model, inputs, reuse=True)
    assert stamped.meta[REUSE].stamped_blocks == DEPTH - 1
    _assert_same_graph(whole, stamped)
    constants = [getattr(stamped, n.target) for n in stamped.graph.nodes if n.op == "get_attr"]
    assert len(constants) == DEPTH and len({id(c) for c in constants}) == DEPTH
    assert all(torch.equal(c, torch.tensor([2.0])) for c in constants)


def test_a_constant_read_across_a_cut_is_traced_whole():
    model, inputs = Scaled(shared=True, depth=16), [torch.randn(2, 8)]  # blocks of 5 nodes
    stamped = _traced(model, inputs, reuse=True)
    assert REUSE not in stamped.meta
    _assert_same_graph(_traced(model, inputs, reuse=False), stamped)


class Masks(torch.nn.Module):
    """Sixteen blocks, each drawing a dropout mask: 0 or 1 per element."""

    def __init__(self, count: int = 16):
        super().__init__()
        self.scales = torch.nn.ParameterList(torch.nn.Parameter(torch.ones(64, 64)) for _ in range(count))

    def forward(self, x):
        return [F.dropout((x * scale + 1.0).abs(), 0.5, training=True).sign() for scale in self.scales]


def test_stamped_random_ops_draw_independently():
    model, inputs = Masks(), [torch.zeros(64, 64)]
    assert _traced(model, inputs, reuse=True).meta[REUSE].stamped_blocks == 15
    with torch.inference_mode():
        masks = tensorjit.compile(model, backend="inductor")(*inputs)
    assert all(set(m.unique().tolist()) == {0.0, 1.0} for m in masks)
    assert len({tuple(m.flatten().tolist()) for m in masks}) == 16


@pytest.mark.parametrize("reuse", [True, False])
def test_compiled_equals_eager(reuse):
    model, x = Stack(depth=DEPTH).eval(), torch.randn(3, 8)
    seen = []

    def backend(gm, example_inputs):
        def compiler(aten_gm, aten_inputs):
            seen.append(aten_gm)
            return aten_gm.forward
        return aot_compile(gm, example_inputs, fw_compiler=compiler, reuse_repeated_blocks=reuse)
    with torch.inference_mode():
        expected = model(x)
        got = tensorjit.compile(model, backend=backend)(x)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(tensorjit.compile(model, backend="inductor",
                                                     options={"reuse_repeated_blocks": reuse})(x), expected)
    assert (REUSE in seen[0].meta) == reuse
