"""The guard kinds: every kind capture records is described for guard_filter_fn."""

import torch

import tensorjit

from conformance.harness import CountingBackend


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.inner(x).relu()


def _keep_all(entries):
    return [True for _ in entries]


def test_guard_filter_sees_the_hook_guards_of_an_inlined_module():
    """A nested module's call records "no_hooks"/"no_global_hooks" guards (and, with a forward
    hook, "no_backward_hooks"/"no_global_backward_hooks"): each is described as a GuardEntry."""
    seen = []

    def record(entries):
        seen.extend(entry.guard_type for entry in entries)
        return _keep_all(entries)
    model = _Outer()
    compiled = tensorjit.compile(model, backend=CountingBackend(), options={"guard_filter_fn": record})
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), model(x))
    assert "NN_MODULE_HOOKS" in seen

    hooked = _Outer()
    hooked.inner.register_forward_hook(lambda module, args, output: output * 2)
    compiled = tensorjit.compile(hooked, backend=CountingBackend(), options={"guard_filter_fn": _keep_all})
    torch.testing.assert_close(compiled(x), hooked(x))
