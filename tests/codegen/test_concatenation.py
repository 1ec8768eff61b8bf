"""Concatenations of many pieces (`lowering_views.lower_cat`): densenet121 concatenates up to
25 feature maps before each batch norm. The selects between pieces form a balanced tree, so a
piece is kept under log2(pieces) conditions; the Triton emitter, which masks off the loads a
select discards (triton/guards.py), lowers up to MAX_MASKED_CAT_PIECES pieces, the C++
emitter (every piece loaded at every element) up to MAX_CAT_PIECES."""

import math

import pytest
import torch

from tensorjit.codegen import ir, lowering_views
from two_emitters import check, compile_with, on_device


def dense_block_input(*features):
    """A concatenation along channels, then batch norm's statistics and normalisation + ReLU
    (training), as each densenet layer begins."""
    x = torch.cat(features, 1)
    return torch.relu(torch.nn.functional.batch_norm(x, None, None, training=True)), x


def features(count: int, channels=(5, 3, 2)) -> list[torch.Tensor]:
    """Pieces of uneven channel counts, a last one of odd spatial size."""
    return [torch.randn(3, channels[k % len(channels)], 5, 7) for k in range(count)]


@pytest.mark.parametrize("count", [2, 3, 7, 16, 25])
def test_many_pieces_are_lowered_by_the_triton_emitter(count):
    assert count <= lowering_views.MAX_MASKED_CAT_PIECES
    check("triton", dense_block_input, *features(count), rtol=1e-4, atol=1e-4)  # no ATen call


def test_the_cpp_emitter_keeps_atens_cat_past_its_limit():
    check("cpp", dense_block_input, *features(lowering_views.MAX_CAT_PIECES), rtol=1e-4, atol=1e-4)
    check("cpp", dense_block_input, *features(lowering_views.MAX_CAT_PIECES + 1), externs=1, rtol=1e-4, atol=1e-4)


def test_the_triton_emitter_keeps_atens_cat_past_its_limit():
    check("triton", dense_block_input, *features(lowering_views.MAX_MASKED_CAT_PIECES + 1), externs=1,
          rtol=1e-4, atol=1e-4)


def select_depths(expr, depth=0) -> list[int]:
    """The number of selects above each load of a concatenation's body."""
    if isinstance(expr, ir.Load):
        return [depth]
    if isinstance(expr, ir.Op) and expr.name == "where":
        return select_depths(expr.args[1], depth + 1) + select_depths(expr.args[2], depth + 1)
    if isinstance(expr, ir.Op):
        return [d for argument in expr.args for d in select_depths(argument, depth)]
    return []


def test_each_piece_is_kept_under_log2_pieces_selects():
    pieces = features(25)
    compiled = compile_with("triton", lambda *xs: torch.cat(xs, 1) * 2, *pieces)
    [kernel] = [s for s in compiled.program.steps if isinstance(s, ir.Pointwise)]
    depths = select_depths(kernel.body)
    assert len(depths) == 25 and max(depths) == math.ceil(math.log2(25)), kernel.body
    [text] = [k.source for k in compiled.hook.kernels.values()]
    loads = text.split("tl.load(")[1:]
    assert len(loads) == 25 and all(") & xmask" in load.split("\n")[0] for load in loads), text  # each guarded
    torch.testing.assert_close(compiled(*on_device("triton", pieces)).cpu(), torch.cat(pieces, 1) * 2)


@pytest.mark.parametrize("emitter", ["cpp", "triton"])
def test_pieces_along_other_dims_and_empty_pieces(emitter):
    pieces = [torch.randn(4, k, 3) for k in (1, 0, 2, 5, 1, 3, 2)]
    check(emitter, lambda *xs: torch.cat(xs, 1).exp(), *pieces, rtol=1e-5, atol=1e-5)
    check(emitter, lambda *xs: torch.cat(xs, -1) + 1, *(torch.randn(2, 3, k) for k in (4, 1, 6, 2, 3)))
