"""Partitioner: saved-tensor counts and sizes, max-flow, what is never recomputed."""

import torch
import torch.fx as fx

from autograd_helpers import lift_symbolic
from tensorjit.autograd import aot_compile
from tensorjit.autograd.maxflow import FlowNetwork
from tensorjit.backends.aot_eager import run_graph_eagerly


def compile_with(gm, inputs, partitioner):
    return aot_compile(gm, inputs, fw_compiler=run_graph_eagerly, partitioner=partitioner)


def two_cosine(x):
    return torch.cos(torch.cos(x))


def test_two_cosine_saves_only_the_input():
    x = torch.randn(32, requires_grad=True)
    gm = fx.symbolic_trace(two_cosine)
    min_cut = compile_with(gm, [x], "min_cut").partition
    save_all = compile_with(gm, [x], "save_all").partition
    assert len(min_cut.saved_names) == 1 and min_cut.saved_bytes == 32 * 4
    assert len(save_all.saved_names) == 2 and save_all.saved_bytes == 2 * 32 * 4


def test_two_cosine_gradient_matches_eager():
    x = torch.randn(32, requires_grad=True)
    compiled = compile_with(fx.symbolic_trace(two_cosine), [x], "min_cut")
    (grad,) = torch.autograd.grad(compiled(x).sum(), x)
    (expected,) = torch.autograd.grad(two_cosine(x).sum(), x)
    torch.testing.assert_close(grad, expected)


def test_max_flow_small_network():
    network = FlowNetwork()
    for start, end, capacity in [("s", "a", 3), ("s", "b", 2), ("a", "b", 1), ("a", "t", 2), ("b", "t", 3)]:
        network.add_edge(start, end, capacity)
    assert network.max_flow("s", "t") == 5


def _depends_on(node, sources):
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        if current in sources:
            return True
        if current not in seen:
            seen.add(current)
            stack.extend(current.all_input_nodes)
    return False


def test_matmul_and_random_ops_are_never_recomputed():
    def f(x, w):
        hidden = torch.relu(torch.mm(x, w))
        return (torch.nn.functional.dropout(hidden, 0.5).sin(),)

    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    part = compile_with(fx.symbolic_trace(f), [x, w], "min_cut").partition
    placeholders = [n for n in part.backward.graph.nodes if n.op == "placeholder"]
    tangents = set(placeholders[len(part.saved_names):])
    for node in part.backward.graph.nodes:
        if node.op != "call_function":
            continue
        expensive = node.target == torch.ops.aten.mm.default or (
            torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()))
        # A backward mm must be a gradient mm (reading a tangent), not a recomputation.
        assert not expensive or _depends_on(node, tangents), node.format_node()


def _models():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                              torch.nn.Linear(32, 4))
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3))
    return [(mlp, torch.randn(4, 16)), (cnn, torch.randn(2, 3, 8, 8))]


def test_min_cut_saves_no_more_bytes_than_save_all():
    for model, x in _models():
        gm, state = lift_symbolic(model)
        inputs = [*state, x]
        min_cut = compile_with(gm, inputs, "min_cut").partition
        save_all = compile_with(gm, inputs, "save_all").partition
        assert min_cut.saved_bytes <= save_all.saved_bytes, type(model)
