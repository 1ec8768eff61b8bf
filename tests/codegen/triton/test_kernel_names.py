"""A kernel is named by its text with the graph's names renumbered (`kernels.shareable`): like
kernels of different layers, or of different graphs, are one kernel, compiled, cached and loaded
once."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen.triton import compile as triton_compile


def test_like_split_reductions_of_two_layers_are_one_kernel(device):
    # Two layers' column sums over 4096 rows, a product between them: each is split into a
    # partials kernel and a final one (split_reductions.py), whose partial buffers are named
    # after the graph's (buf3_partials, buf6_partials). GPT-2's training backward had 157
    # distinct kernels of 179 on the H100 while those names stayed in the kernels' text.
    def two_layers(x, y, w):
        first = (x * y).sum(0)
        return first, ((x * first) @ w * y).sum(0)

    inputs = [torch.randn(4096, 256, device=device), torch.randn(4096, 256, device=device),
              torch.randn(256, 256, device=device)]
    runner = triton_compile.compile_graph(make_fx(two_layers)(*inputs), inputs)  # not run: compiled only
    kernels = runner.hook.kernels
    partials = [step for step in kernels if step.endswith("_partials")]
    finals = [step.removesuffix("_partials") for step in partials]
    assert len(partials) == 2, list(kernels)
    assert kernels[partials[0]].name == kernels[partials[1]].name, [kernels[s].source for s in partials]
    assert kernels[finals[0]].name == kernels[finals[1]].name, [kernels[s].source for s in finals]
    assert kernels[partials[0]].arguments != kernels[partials[1]].arguments  # different buffers, one kernel
    assert "_partials" not in "".join(kernels[s].source for s in partials + finals)
