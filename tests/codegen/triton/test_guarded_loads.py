"""A concatenation (or constant padding) reads each element from the one piece it keeps: the
lowering selects between the pieces by position (`lower_cat`), and the Triton writers mask
each piece's load to the positions that select it (`triton.guards`). Every piece was loaded
at every element (GPT-2's backward stacks the q, k and v gradients: three loads an element)."""

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import ir
from tensorjit.codegen.triton import compile as triton_compile, decompositions
from tensorjit.codegen.triton.guards import load_guards



def compile_fn(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    return triton_compile.compile_graph(gm, list(inputs))


def load_masks(compiled) -> list[str]:
    """The mask of every masked load in the kernels' text."""
    masks = []
    for kernel in compiled.hook.kernels.values():
        for text in kernel.source.split("tl.load(")[1:]:
            depth, arguments, start = 0, [], 0
            for position, character in enumerate(text):
                depth += {"(": 1, ")": -1}.get(character, 0)
                if depth == 0 and character == ",":
                    arguments.append(text[start:position])
                    start = position + 1
                if depth < 0:
                    arguments.append(text[start:position])
                    break
            masks += [arguments[1].strip()] if len(arguments) > 1 else []
    return masks


def stack_heads(q, k, v):
    return torch.stack([q, k, v]).permute(1, 3, 0, 2, 4).reshape(q.shape[0], q.shape[2], -1)


def test_stacked_gradients_load_each_piece_only_where_it_is_kept(device):
    q, k, v = (torch.randn(2, 3, 8, 4, device=device) for _ in range(3))
    compiled = compile_fn(stack_heads, q, k, v)
    masks = load_masks(compiled)
    assert len(masks) == 3 and all("tmp" in mask for mask in masks), [k.source for k in compiled.hook.kernels.values()]
    torch.testing.assert_close(compiled(q, k, v), stack_heads(q, k, v))


def unguarded(a, b):
    return torch.cat([a, b], 0) + torch.cat([b, a], 0)  # a and b are kept at every position


@pytest.mark.parametrize("fn", [
    lambda a, b: torch.cat([a * 2, b.exp()], 1).sum(1),           # a row reduction over the pieces
    lambda a, b: torch.softmax(torch.cat([a, b], 1), 1),           # a row group
    lambda a, b: torch.cat([a, b], 0) * torch.cat([a, b * 2], 0),  # a load kept by two equal selects
    unguarded,
    lambda a, b: F.pad(a, (2, 3)) * F.pad(b, (2, 3)),              # constant padding
])
def test_guarded_loads_give_eager_results(device, fn):
    a, b = torch.randn(6, 10, device=device), torch.randn(6, 10, device=device)
    compiled = compile_fn(fn, a, b)
    masks = load_masks(compiled)
    assert any("tmp" in mask for mask in masks) == (fn is not unguarded), masks
    torch.testing.assert_close(compiled(a, b), fn(a, b), rtol=1e-5, atol=1e-5)


def test_a_load_used_outside_the_select_is_always_loaded():
    i = ir.IndexVar("i0")
    load = ir.Load("x", i, "float32")
    condition = ir.Op("lt", (ir.IndexValue(i, "int64"), ir.Constant(4, "int64")), "bool")
    selected = ir.Op("where", (condition, load, ir.Constant(0.0, "float32")), "float32")
    assert load_guards([selected])[("x", i)] == ((condition, True),)
    assert load_guards([ir.Op("add", (selected, load), "float32")])[("x", i)] == ()
    assert load_guards([selected, load])[("x", i)] == ()  # (two bodies of one kernel)
    # a select on a loaded value (ReLU's backward) keeps scattered lanes: no guard
    data = ir.Op("gt", (ir.Load("y", i, "float32"), ir.Constant(0.0, "float32")), "bool")
    assert load_guards([ir.Op("where", (data, load, ir.Constant(0.0, "float32")), "float32")])[("x", i)] == ()
