"""The inductor backend on CUDA: Triton kernels through tensorjit.compile, inference and training."""

import copy

import pytest
import torch

import tensorjit
from tensorjit.__main__ import TinyBlock

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_tinyblock_inference_fp16():
    torch.manual_seed(0)
    model = TinyBlock(256).cuda().half().eval()
    x = torch.randn(8, 64, 256, device="cuda", dtype=torch.float16)
    compiled = tensorjit.compile(model)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-2, atol=1e-2)


def test_tinyblock_training_step_matches_eager():
    torch.manual_seed(0)
    model = TinyBlock(128).cuda()
    reference = copy.deepcopy(model)
    compiled = tensorjit.compile(model)
    for _ in range(2):
        x = torch.randn(4, 16, 128, device="cuda")
        compiled(x).square().mean().backward()
        reference(x).square().mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4)
            p.grad = q.grad = None


def test_reduce_overhead_mode_replays():
    torch.manual_seed(0)
    model = TinyBlock(128).cuda().eval()
    compiled = tensorjit.compile(model, mode="reduce-overhead")
    x = torch.randn(4, 16, 128, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-3, atol=1e-3)
