"""The lowering's values of a graph's nodes come from the trace's meta["val"], without running it."""

import operator

import torch
import torch.fx

from tensorjit.codegen.graph import node_values


def _pair(x):
    return x + 1, 3


def test_an_unrecorded_int_item_of_a_traced_tuple_is_read_from_the_tuple():
    # make_fx records a multi-output op's tuple but not its non-tensor items (cuDNN attention's
    # sequence lengths): the graph must not run eagerly (a second execution, seconds on a model).
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    pair = graph.call_function(_pair, (x,))
    first = graph.call_function(operator.getitem, (pair, 0))
    second = graph.call_function(operator.getitem, (pair, 1))
    graph.output((first, second))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    value = torch.empty(2, device="meta")
    x.meta["val"], pair.meta["val"], first.meta["val"] = value, (value, 3), value

    class NotRun:
        def __iter__(self):
            raise AssertionError("the graph ran")

    values = node_values(gm, NotRun())
    assert values[second] == 3 and values[first] is value


def test_a_node_without_a_value_runs_the_graph_once():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    pair = graph.call_function(_pair, (x,))
    graph.output(graph.call_function(operator.getitem, (pair, 1)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    values = node_values(gm, [torch.zeros(2)])
    assert values[pair][1] == 3 and torch.equal(values[pair][0], torch.ones(2))
