"""The `aot_eager_decomp_partition` backend: torch.compile's debugging backend of that name."""

import torch

import tensorjit


def test_a_training_step_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(4), torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.GELU())
    reference = torch.nn.Sequential(torch.nn.BatchNorm2d(4), torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.GELU())
    reference.load_state_dict(model.state_dict())
    compiled = tensorjit.compile(model, backend="aot_eager_decomp_partition")
    x = torch.randn(2, 4, 6, 6, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    for _ in range(2):
        out, ref = compiled(x), reference(x_ref)
        torch.testing.assert_close(out, ref)
        out.sum().backward()
        ref.sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    for b, c in zip(model.buffers(), reference.buffers()):
        torch.testing.assert_close(b, c)
    assert "aot_eager_decomp_partition" in tensorjit.list_backends()
