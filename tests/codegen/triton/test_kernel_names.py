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


def test_a_deeper_stack_of_like_layers_compiles_no_more_kernels(device, monkeypatch):
    """GPT-2's training step with 2 and with 3 layers: the backward launches more kernels, but
    not more distinct ones. Reductions split at small sizes here, as GPT-2 small's do on the GPU
    (its bias and layer-norm gradients over 2048 rows)."""
    import sys
    from pathlib import Path

    import tensorjit
    from tensorjit.autograd import aot_compile
    from tensorjit.codegen.triton import decompositions, split_reductions

    sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))
    from gpu_models import GPT2, GPT2Settings

    monkeypatch.setattr(split_reductions, "MIN_REDUCTION", 16)
    monkeypatch.setattr(split_reductions, "MIN_WORK", 1024)
    monkeypatch.setattr(split_reductions, "MIN_PARTIAL", {True: 8, False: 8})

    def backward_kernels(layers):
        torch.manual_seed(0)
        model = GPT2(GPT2Settings(vocab_size=64, context=32, layers=layers, heads=2, width=32)).to(device)
        runners = []

        def compiler(gm, inputs):
            runners.append(triton_compile.compile_graph(gm, inputs))
            return runners[-1]

        compiled = tensorjit.compile(model, backend=lambda gm, inputs: aot_compile(
            gm, inputs, fw_compiler=compiler, decompositions=decompositions()))
        logits = compiled(torch.randint(0, 64, (2, 32), device=device))
        (logits[0] if isinstance(logits, (tuple, list)) else logits).float().logsumexp(-1).mean().backward()
        assert len(runners) == 2  # forward and backward, each compiled
        kernels = runners[1].hook.kernels
        assert any(step.endswith("_partials") for step in kernels), list(kernels)
        return len(kernels), {kernel.name for kernel in kernels.values()}

    launches2, distinct2 = backward_kernels(2)
    launches3, distinct3 = backward_kernels(3)
    assert launches3 > launches2
    # (a kernel or two at the stack's ends may differ with its depth: the sum of every layer's
    # contribution to the embeddings' gradient, say; the layers' own kernels may not)
    assert len(distinct3) <= len(distinct2), (len(distinct2), len(distinct3))
