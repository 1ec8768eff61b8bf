"""A compiled backward frees each saved activation after its last reader, not when it returns.

The autograd runtime releases the node's saved tensors before the compiled backward runs
(unless the graph is retained) and hands it its inputs in a list it takes over
(runtime/boxed.py). Observed from inside the backward: `probe` is the identity whose
gradient goes through `observe`, an opaque op that runs at the very end of the backward (the
gradient of the function's first op) and records which saved activations' storages are gone.
"""

from __future__ import annotations

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

import tensorjit

WATCHED: list[StorageWeakRef] = []
SEEN: list[int] = []
"""Per run of `observe`: how many `WATCHED` storages were freed by then."""


@torch.library.custom_op("tensorjit_test::observe_saved", mutates_args=())
def observe(grad: torch.Tensor) -> torch.Tensor:
    SEEN.append(sum(ref.expired() for ref in WATCHED))
    return grad.clone()


@observe.register_fake
def _(grad):
    return torch.empty_like(grad)


@torch.library.custom_op("tensorjit_test::probe_saved", mutates_args=())
def probe(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@probe.register_fake
def _(x):
    return torch.empty_like(x)


probe.register_autograd(lambda ctx, grad: observe(grad))


def layers(x, w1, w2):
    """Two products around a ReLU: what a product and the ReLU save (the first product's input,
    its output or mask) are activations no other value keeps alive."""
    h = probe(x) @ w1
    return (h.relu() @ w2).tanh().sum()


def inputs():
    torch.manual_seed(0)
    return [torch.randn(64, 32, requires_grad=True), torch.randn(32, 256, requires_grad=True),
            torch.randn(256, 16, requires_grad=True)]


def watch(loss: torch.Tensor, values) -> int:
    """Watch the storages of what the compiled function's node saved, other than its inputs."""
    node = loss.grad_fn
    while node is not None and not hasattr(node, "saved_tensors"):
        node = node.next_functions[0][0]
    own = {value.untyped_storage().data_ptr() for value in values}
    WATCHED[:] = [StorageWeakRef(t.untyped_storage()) for t in node.saved_tensors
                  if t.untyped_storage().data_ptr() not in own]
    SEEN.clear()
    return len(WATCHED)


def gradients(values):
    grads = [value.grad.clone() for value in values]
    for value in values:
        value.grad = None
    return grads


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_saved_activations_are_freed_inside_the_backward(backend):
    """From the second step on (inductor's first call keeps its inputs until it has passed its
    ATen shape checks once), every saved activation is gone when the backward's last op runs;
    gradients are eager's."""
    values = inputs()
    layers(*values).backward()
    expected = gradients(values)
    tensorjit.reset()
    compiled = tensorjit.compile(layers, backend=backend)
    for _ in range(3):
        loss = compiled(*values)
        assert watch(loss, values) > 0
        loss.backward()
        for actual, wanted in zip(gradients(values), expected):
            torch.testing.assert_close(actual, wanted)
    assert SEEN == [len(WATCHED)]


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_a_retained_graph_keeps_its_saved_activations(backend):
    """retain_graph=True: the saved activations outlive the backward, and a second backward gives
    eager's accumulated gradients (and frees them inside, the graph no longer retained); a third
    fails with eager's error."""
    values = inputs()
    loss = layers(*values)
    loss.backward(retain_graph=True)
    loss.backward()
    expected = gradients(values)
    with pytest.raises(RuntimeError, match="backward through the graph a second time") as eager_error:
        loss.backward()
    tensorjit.reset()
    compiled = tensorjit.compile(layers, backend=backend)
    compiled(*values).backward()  # inductor's first call passes its shape checks
    gradients(values)
    loss = compiled(*values)
    count = watch(loss, values)
    loss.backward(retain_graph=True)
    assert SEEN == [0]
    loss.backward()
    assert SEEN == [0, count]
    for actual, wanted in zip(gradients(values), expected):
        torch.testing.assert_close(actual, wanted)
    with pytest.raises(RuntimeError, match="backward through the graph a second time") as error:
        loss.backward()
    assert str(error.value) == str(eager_error.value)
