"""Graph counts under dynamic shapes, against Dynamo's on the same programs in one process.

With dynamic=True one graph must serve every size where torch.compile compiles one; with
dynamic=None (automatic dynamic) the second size makes the graph symbolic, as in torch.
A shape formatted into text (an f-string, str.format) that the program never reads back
does not specialize the size; text that is read (compared) does, in both compilers.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import tensorjit

from .harness import REFERENCE, CountingBackend

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")

SIZES = (4, 6, 8, 10)
linear = torch.nn.Linear(8, 8)


def mlp(x):
    return F.gelu(linear(x)).softmax(-1)


def reshape_numel(x):
    return x.reshape(-1, 2).sum(1) + x.numel()


def view_by_shape(x):
    b, n = x.shape
    return x.view(b * n).cumsum(0)[:n]


def chunk_and_cat(x):
    a, b = x.chunk(2, dim=0)
    return torch.cat([b, a]) * x.size(0)


def factories_from_sizes(x):
    return x + torch.ones(x.shape[0], x.shape[1]) * torch.arange(x.shape[1])


def slice_by_size(x):
    return x[: x.shape[0] // 2].mean()


def expand_by_shape(x):
    return x.unsqueeze(0).expand(3, *x.shape).sum(0)


def pad(x):  # constant_pad_nd's C++ meta function specializes; its Python one does not
    return F.pad(x, (1, 1)).mean(-1)


def attention(x):
    q = x.unsqueeze(0)
    return F.scaled_dot_product_attention(q, q, q).squeeze(0)


def shape_in_fstring(x):
    message = f"input of shape {tuple(x.shape)}"  # a log line nobody prints
    return x.sin()


def shape_in_format(x):
    message = "rows={} cols={}".format(x.size(0), x.size(1))
    return x.relu()


def fstring_of_fstring(x):
    rows = f"{x.shape[0]}"
    message = f"[{rows}] x {x.shape[1]}"
    return x.cos()


def text_read_back(x):  # comparing the text reads the size: one graph per size, in torch too
    if f"{x.shape[0]}" == "4":
        return x + 1
    return x - 1


def text_across_a_break(x):
    message = f"{tuple(x.shape)}"
    y = x * 2
    torch._dynamo.graph_break()
    return y, message


PROGRAMS = [mlp, reshape_numel, view_by_shape, chunk_and_cat, factories_from_sizes, slice_by_size,
            expand_by_shape, pad, attention, shape_in_fstring, shape_in_format,
            text_read_back, text_across_a_break]


def graph_count(use_tensorjit: bool, program, dynamic) -> int:
    counter = CountingBackend()
    (tensorjit.reset if use_tensorjit else torch._dynamo.reset)()
    compiled = (tensorjit.compile if use_tensorjit else torch.compile)(program, backend=counter, dynamic=dynamic)
    for size in SIZES:
        x = torch.randn(size, 8)
        expected, actual = program(x), compiled(x)
        if isinstance(expected, tuple):
            torch.testing.assert_close(actual[0], expected[0])
            assert actual[1:] == expected[1:]
        else:
            torch.testing.assert_close(actual, expected)
    return counter.graph_count


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_graph_counts_equal_dynamos(program, dynamic):
    assert graph_count(True, program, dynamic) == graph_count(False, program, dynamic)


def returned_text(x):
    return x * 2, f"batch_{x.shape[0]}"


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("program", [returned_text, fstring_of_fstring], ids=["returned", "nested"])
def test_text_from_text_or_returned_is_rebuilt_not_specialized(program, dynamic):
    """Returned text is rebuilt from the run-time sizes, and an f-string of an f-string stays lazy;
    torch.compile specializes both (one graph per size): fewer graphs, the same results."""
    ours, torchs = graph_count(True, program, dynamic), graph_count(False, program, dynamic)
    assert ours <= torchs and ours == (1 if dynamic else 2)


class StepCounter:
    def __init__(self):
        self.calls = 2


counter_state = StepCounter()


def counts_calls(x):  # an int attribute advanced on every call (an LR scheduler's _step_count)
    counter_state.calls += 1
    return x * counter_state.calls


def test_changing_int_attribute_becomes_symbolic():
    """A graph for the first value, one for any other: torch.compile recompiles for every value here."""
    counts = []
    for use_tensorjit in (True, False):
        counter_state.calls = 2
        counter = CountingBackend()
        (tensorjit.reset if use_tensorjit else torch._dynamo.reset)()
        compiled = (tensorjit.compile if use_tensorjit else torch.compile)(counts_calls, backend=counter)
        for _ in range(6):
            x = torch.randn(3)
            expected_calls = counter_state.calls + 1
            torch.testing.assert_close(compiled(x), x * expected_calls)
        assert counter_state.calls == 8
        counts.append(counter.graph_count)
    assert counts[0] == 2 and counts[0] <= counts[1]


def test_dict_keyed_by_tensors_is_read_in_the_graph():
    """An optimizer's `state[param]`: the item is found by the tensor's identity, and guarded."""
    weights = [torch.randn(3), torch.randn(3)]
    state = {w: {"scale": torch.full((3,), float(i + 2))} for i, w in enumerate(weights)}

    def scaled(ws):
        return [w * state[w]["scale"] for w in ws]

    counts = []
    for use_tensorjit in (True, False):
        counter = CountingBackend()
        (tensorjit.reset if use_tensorjit else torch._dynamo.reset)()
        compiled = (tensorjit.compile if use_tensorjit else torch.compile)(scaled, backend=counter)
        torch.testing.assert_close(compiled(weights), scaled(weights))
        torch.testing.assert_close(compiled(weights[::-1]), scaled(weights[::-1]))
        counts.append(counter.graph_count)
    assert counts[0] == 1 and counts[0] <= counts[1]  # the items are read through their keys' sources


torch.manual_seed(0)
convolution = torch.nn.Conv2d(8, 4, 3, padding=1)
encoder_layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0).eval()


def conv_and_pool(x):
    return F.max_pool2d(convolution(x.t().unsqueeze(0).unsqueeze(-1)), (2, 1)).relu()


def transformer_layer(x):
    return encoder_layer(x.unsqueeze(0))


def top_half(x):
    return x.topk(x.shape[0] // 2, dim=0).values


def lower_triangle(x):
    return torch.tril(torch.ones(x.shape[0], x.shape[0])) @ x


def batched_matmul(x):
    return torch.bmm(x.unsqueeze(0), x.t().unsqueeze(0))


def causal_attention(x):
    q = x.reshape(1, 1, *x.shape)
    return F.scaled_dot_product_attention(q, q, q, is_causal=True)


def cross_entropy(x):
    return F.cross_entropy(x, torch.zeros(x.shape[0], dtype=torch.long))


MORE_PROGRAMS = [conv_and_pool, transformer_layer, top_half, lower_triangle, batched_matmul, causal_attention,
                 cross_entropy]


@pytest.mark.parametrize("program", MORE_PROGRAMS, ids=[p.__name__ for p in MORE_PROGRAMS])
def test_dynamic_true_one_graph_where_dynamo_has_at_most_two(program):
    """One graph over four sizes; torch.compile compiles one or two (bmm, causal attention)."""
    ours, torchs = graph_count(True, program, True), graph_count(False, program, True)
    assert ours == 1 and ours <= torchs
