"""An entry the warm-start cache cannot save keeps the reason, not the frames that found it: the
tensors of the call that captured it (gradients, optimizer state) die when the program drops them."""

import gc
import weakref

import torch

import tensorjit


def _train_step_refs():
    model = torch.nn.Linear(8, 8, bias=False)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.01)

    def opt_step():
        optimizer.step()

    compiled = tensorjit.compile(opt_step, backend="eager")
    for _ in range(2):  # the second call saves (or tries to save) the entries again
        optimizer.zero_grad(True)
        torch.sum(model(torch.ones(8))).backward()
        compiled()
    grad = weakref.ref(next(iter(model.parameters())).grad)
    state = weakref.ref(optimizer.state[optimizer.param_groups[0]["params"][0]]["square_avg"])
    return grad, state, optimizer, compiled


def test_gradients_and_optimizer_state_die_with_the_program_references():
    grad, state, optimizer, compiled = _train_step_refs()
    optimizer.zero_grad(True)
    gc.collect()
    assert grad() is None
    optimizer = compiled = None  # the compiled step closes over the optimizer
    gc.collect()
    assert state() is None
