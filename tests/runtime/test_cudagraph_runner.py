"""CUDA graph bookkeeping on the CPU: keys, refusals and their log lines, pools, saved activations.

`FakeDeviceRunner` replaces the runner's device work with a CPU imitation of a
CUDA graph: "capture" runs the function once on the static inputs, and
"replay" runs it again and writes the results into the same output buffers, as
a replay overwrites its static outputs. Everything else (keys, copies,
clones, leases, aliases, version counters, pools) is the real code; the CPU
build of torch cannot revoke a storage, so `_revoke` notes what a GPU revokes.
"""

import contextlib
import copy
import gc
import weakref

import pytest
import torch

import tensorjit
from tensorjit import logs
from tensorjit.autograd import aot_compile
from tensorjit.backends.inductor import cudagraph_wrapper
from tensorjit.capture import native_guards
from tensorjit.config import MODES, Config, config as default_config
from tensorjit.runtime import cudagraphs
from tensorjit.runtime.cudagraphs import (
    CudaGraphRunner, Settings, choose_pool, recording_key, shape_of, ungraphable_reason, warm_up_refusal,
)


class FakeDeviceRunner(CudaGraphRunner):
    device_type = "cpu"
    hands_out = True
    hands_out_gradients = staticmethod(lambda: False)  # HandingOutRunner: with the native extension
    pools_made = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.revoked = []

    def _revoke(self, storage_pointer, message):
        self.revoked.append((storage_pointer, message))

    def _new_pool(self):
        FakeDeviceRunner.pools_made += 1
        return ("pool", FakeDeviceRunner.pools_made)

    def _pool_place(self, pool):
        return contextlib.nullcontext()

    def _run_warm_up_calls(self, copies):
        for _ in range(self.settings.warmup_calls):
            outputs = self.function(*copies)
        return outputs

    def _capture(self, static_inputs, pool):
        return "graph", self.function(*static_inputs)

    def _launch(self, recording, inputs):
        # Static buffers for copied inputs, the caller's tensors for those read in place.
        arguments = [value if index not in recording.copied else recording.static_inputs[index]
                     for index, value in enumerate(inputs)]
        with torch.no_grad():
            fresh, _ = cudagraphs.flatten(self.function(*arguments))
            for buffer, value in zip(recording.static_outputs, fresh):
                if isinstance(buffer, torch.Tensor):
                    buffer.data.copy_(value)  # .data: a device write, which bumps no version counter


def fake_wrapper(settings=Settings(), runner_class=None):
    runners = []

    def wrap(compiled, kind, saved_outputs=0, kept_outputs=None):
        runner = (runner_class or FakeDeviceRunner)(compiled, kind=kind, saved_outputs=saved_outputs,
                                                    kept_outputs=kept_outputs, settings=settings,
                                                    pure=True)  # as wrap_compiled's: aot_compile's graphs
        runners.append(runner)
        return runner

    return wrap, runners


@pytest.fixture(autouse=True)
def fresh_logs():
    logs.clear()
    yield
    logs.clear()


# -- refusals and keys ---------------------------------------------------------------


def test_refusal_reasons():
    x = torch.randn(3)
    assert ungraphable_reason([x]) == "inputs on the CPU"
    assert ungraphable_reason([x, "a"]) == "an input of type str"
    assert ungraphable_reason([1, 2]) == "no tensor inputs"
    assert ungraphable_reason([x, 3, None], device_type="cpu") is None
    weight = torch.randn(3, requires_grad=True)
    assert "gradients are recorded" in ungraphable_reason([weight], device_type="cpu")
    with torch.no_grad():
        assert ungraphable_reason([weight], device_type="cpu") is None


def test_key_refuses_what_ungraphable_reason_refuses():
    x = torch.randn(3)
    weight = torch.randn(3, requires_grad=True)
    for inputs in ([x], [x, "a"], [1, 2], [weight]):
        assert recording_key(inputs, device_type="cuda") is None
    assert recording_key([weight], device_type="cpu") is None
    assert recording_key([x, 3, None], device_type="cpu") is not None


def test_cpu_inputs_run_eagerly_with_one_log_line():
    runner = CudaGraphRunner(lambda x: (x + 1,), name="g")
    for _ in range(3):
        (result,) = runner(torch.ones(2))
        torch.testing.assert_close(result, torch.full((2,), 2.0))
    assert runner.eager_calls == 3 and not runner.recordings
    assert logs.recent("cudagraphs") == ["g: not replayed through a CUDA graph: inputs on the CPU"]


def test_key_holds_addresses_of_inputs_read_in_place_only():
    parameter = torch.nn.Parameter(torch.randn(4))
    x = torch.randn(4)
    assert [cudagraphs.read_in_place(v) for v in (parameter, x, 3)] == [True, False, False]
    key = recording_key([parameter, x, 3])
    assert key[2] == parameter.data_ptr() and key[3] == (x.shape, x.stride(), x.dtype, -1) and key[4] == (int, 3)
    assert cudagraphs.in_place_of(key) == [True, False, False]
    assert shape_of(key) == shape_of(recording_key([torch.nn.Parameter(torch.randn(4)), x, 3]))
    assert recording_key([x]) != recording_key([x.t()[None]])  # shape differs
    with torch.inference_mode():
        inference_key = recording_key([x])
    assert inference_key != recording_key([x])


def test_key_of_module_state_is_its_address():
    """Inputs the capture read from module state are keyed by address (their layout is guarded)."""
    buffer, x = torch.randn(4), torch.randn(4)
    key = recording_key([buffer, x], static_input_indices=frozenset({0}))
    assert key[1] == (buffer.data_ptr(),) and cudagraphs.in_place_of(key, frozenset({0})) == [True, False]
    assert recording_key([torch.randn(4), x], static_input_indices=frozenset({0})) != key  # moved: another key


def test_key_of_many_module_state_inputs():
    """Module state read in one pass: every input's address counts, the refusals still hold."""
    state = [torch.randn(3) for _ in range(5)]
    x = torch.randn(2)
    static = frozenset({0, 2, 3, 5})
    inputs = [state[0], x, state[1], state[2], 7, state[3]]
    key = recording_key(inputs, static_input_indices=static)
    assert key[1] == tuple(state[i].data_ptr() for i in range(4))
    assert cudagraphs.in_place_of(key, static) == [True, False, True, True, False, True]
    for index in sorted(static):  # any one moved: another key, of the same shape
        moved = list(inputs)
        moved[index] = torch.randn(3)
        other = recording_key(moved, static_input_indices=static)
        assert other != key and shape_of(other) == shape_of(key)
    weight = torch.randn(3, requires_grad=True)
    assert recording_key([weight, x], static_input_indices=frozenset({0}), device_type="cpu") is None
    with torch.no_grad():
        assert recording_key([weight, x], static_input_indices=frozenset({0}), device_type="cpu") is not None
    # Not a tensor where module state was read: keyed input by input, as any other input.
    fallback = recording_key([3, x], static_input_indices=frozenset({0}))
    assert fallback[1] is None and fallback[2] == (int, 3)
    assert cudagraphs.in_place_of(fallback, frozenset({0})) == [False, False]
    assert recording_key([x], static_input_indices=frozenset({4})) == recording_key([x])  # out of range


def test_clone_plan_batches_gradients_and_keeps_layouts():
    outputs = [torch.randn(3, 4) for _ in range(9)] + [torch.randn(4, 3).t(), None, torch.randn(2).half()]
    plan = cudagraphs.ClonePlan.of(outputs, batched=True)
    assert [len(positions) for positions, _ in plan.batches] == [9] and plan.single == [9, 11]
    copies = plan.copy(outputs)
    for original, copy in zip(outputs, copies):
        if original is None:
            assert copy is None
            continue
        assert copy.data_ptr() != original.data_ptr() and copy.stride() == original.stride()
        torch.testing.assert_close(copy, original)
    outputs[0].add_(1)  # the next replay writes the originals: the copies keep their values
    assert not torch.equal(copies[0], outputs[0])
    assert cudagraphs.ClonePlan.of(outputs, batched=False).batches == []


def test_warm_up_refusals():
    assert "writes in place to input 0" in warm_up_refusal([True, False], [0], [])
    assert warm_up_refusal([False, False], [0], [torch.randn(1, device="meta")]) is not None
    assert "on the CPU" in warm_up_refusal([False], [], [torch.randn(1)])
    assert warm_up_refusal([False], [0], [None, 3]) is None


def test_pool_choice():
    made = []

    def new_pool():
        made.append(object())
        return made[-1]

    shared = object()
    assert choose_pool("inference", [], lambda: shared, new_pool) is shared
    first, second = choose_pool("forward", [], None, new_pool), choose_pool("forward", [], None, new_pool)
    assert first is not second  # a forward's saved activations must not share memory with another forward
    saved = torch.randn(4)
    cudagraphs._saved_buffers[saved.data_ptr()] = first
    try:
        assert choose_pool("backward", [saved], None, new_pool) is first
    finally:
        del cudagraphs._saved_buffers[saved.data_ptr()]
    assert choose_pool("backward", [torch.nn.Parameter(torch.randn(2))], None, new_pool) is made[-1]


# -- replays on the fake device ---------------------------------------------------------


def test_replays_hand_out_outputs_and_revoke_those_still_held():
    runner = FakeDeviceRunner(lambda x, y: (x * y, x.sum()))
    held = []
    for _ in range(3):
        x, y = torch.randn(5), torch.randn(5)
        product, total = runner(x, y)
        torch.testing.assert_close(product, x * y)
        torch.testing.assert_close(total, x.sum())
        held.append((product, total))
    static = next(iter(runner.recordings.values())).static_outputs
    for product, total in held:  # each replay's own tensors over the static buffers: no copies
        assert product.data_ptr() == static[0].data_ptr() and total.data_ptr() == static[1].data_ptr()
        assert product is not static[0] and product.untyped_storage()._cdata != static[0].untyped_storage()._cdata
    # Each replay revoked what the one before handed out, which the caller still held.
    assert [pointer for pointer, _ in runner.revoked] == [
        t.untyped_storage()._cdata for t in (*held[0], *held[1])]
    assert "a later call of it has overwritten it" in runner.revoked[0][1] and "clone it" in runner.revoked[0][1]
    assert runner.replays == 3 and runner.eager_calls == 0 and len(runner.recordings) == 1


def test_a_replay_revokes_what_every_recording_of_the_shared_pool_handed_out():
    """Inference recordings of one runner share a pool, and a later recording's outputs may lie in an
    earlier one's intermediates, which the earlier one's replays write: a replay of either revokes
    the outputs of both (outputs live until the runner's next call, as under torch.compile)."""
    runner = FakeDeviceRunner(lambda x: (x * 2,))
    small = runner(torch.randn(4))[0]
    large = runner(torch.randn(8))[0]  # a second recording, in the same pool
    assert len(runner.recordings) == 2 and runner.revoked == [(small.untyped_storage()._cdata, runner.revoked[0][1])]
    runner(torch.randn(4))  # replays the first recording: its intermediates may be under `large`
    assert [pointer for pointer, _ in runner.revoked][1:] == [large.untyped_storage()._cdata]


def test_an_input_written_in_place_that_another_recording_handed_out_runs_eagerly():
    """Its replay would revoke that input (the pool's leases) before writing the new values back."""
    def scale_(x):
        x.mul_(2)
        return (x[:4] + 1,)

    runner = FakeDeviceRunner(scale_)
    for size in (4, 4, 8):
        runner(torch.randn(size))
    handed_out = runner(torch.randn(8))[0]  # the second recording's output, of the first's shape
    expected = handed_out * 2
    eager_before = runner.eager_calls
    output = runner(handed_out)[0]
    assert runner.eager_calls == eager_before + 1
    torch.testing.assert_close(handed_out, expected)
    torch.testing.assert_close(output, expected + 1)
    assert any("an input written in place is an output of an earlier replay" in line
               for line in logs.recent("cudagraphs"))


def test_outputs_dropped_before_the_next_call_are_not_revoked():
    runner = FakeDeviceRunner(lambda x: (x + 1,))
    for _ in range(3):
        runner(torch.randn(4))
    assert runner.replays == 3 and runner.revoked == []


def test_views_of_one_output_share_one_handed_out_storage():
    runner = FakeDeviceRunner(lambda x: (lambda y: (y, y[1:], y.t()))((x + 1).view(2, 2)))
    whole, tail, transposed = runner(torch.zeros(4))
    storages = {t.untyped_storage()._cdata for t in (whole, tail, transposed)}
    assert len(storages) == 1
    assert (tail.storage_offset(), transposed.stride()) == (2, (1, 2))
    whole.add_(1)  # in place through one, seen through the others, as in eager
    torch.testing.assert_close(transposed, torch.full((2, 2), 2.0))


def test_outputs_viewing_an_input_are_cloned_not_handed_out():
    runner = FakeDeviceRunner(lambda x: (x.view(2, 2), x + 1))
    first = runner(torch.zeros(4))
    runner(torch.ones(4))
    torch.testing.assert_close(first[0], torch.zeros(2, 2))  # a clone: its static input was overwritten
    assert next(iter(runner.recordings.values())).lease.positions == {1}


def test_an_earlier_output_written_in_place_runs_eagerly():
    def step(x):
        x.mul_(2)
        return (x + 1,)

    runner = FakeDeviceRunner(step)
    (out,) = runner(torch.ones(3))
    (again,) = runner(out)  # writes the earlier output, which the replay would overwrite
    torch.testing.assert_close(out, torch.full((3,), 6.0))
    torch.testing.assert_close(again, torch.full((3,), 7.0))
    assert runner.replays == 1 and runner.eager_calls == 1
    assert any("output of an earlier replay" in line for line in logs.recent("cudagraphs"))


def test_a_held_output_keeps_the_static_buffers_alive_after_the_runner_is_dropped():
    runner = FakeDeviceRunner(lambda x: (x * 2,))
    (out,) = runner(torch.ones(3))
    static = weakref.ref(next(iter(runner.recordings.values())).static_outputs[0])
    del runner
    gc.collect()
    assert static() is not None and static().data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    del out
    gc.collect()
    assert static() is None


def test_inputs_mutated_in_place_are_written_back():
    def mutate(x, y):
        x.mul_(2)
        return (x + y,)

    runner = FakeDeviceRunner(mutate)
    for _ in range(2):
        x, y = torch.randn(4), torch.randn(4)
        expected = x * 2
        (result,) = runner(x, y)
        torch.testing.assert_close(x, expected)
        torch.testing.assert_close(result, expected + y)
    assert runner.replays == 2


def test_inference_mode_and_no_grad():
    runner = FakeDeviceRunner(lambda x: (torch.relu(x) + 1,))
    for context in (torch.inference_mode, torch.no_grad, torch.inference_mode):
        with context():
            x = torch.randn(6)
            (result,) = runner(x)
            torch.testing.assert_close(result, torch.relu(x) + 1)
    assert runner.replays == 3 and len(runner.recordings) == 2  # inference mode is part of the key


def test_mutated_inference_input_is_detected_without_version_counters():
    def mutate(x):
        x.add_(1)
        return (x * 3,)

    runner = FakeDeviceRunner(mutate)
    with torch.inference_mode():
        x = torch.zeros(3)
        (result,) = runner(x)
    torch.testing.assert_close(x, torch.ones(3))
    torch.testing.assert_close(result, torch.full((3,), 3.0))
    assert next(iter(runner.recordings.values())).mutated == [0]


def test_inputs_holding_tuples_of_tensors_are_flattened():
    runner = FakeDeviceRunner(lambda x, pair: (x * pair[0] + pair[1],))
    for _ in range(2):
        x, a, b = torch.randn(3), torch.randn(3), torch.randn(3)
        torch.testing.assert_close(runner(x, (a, b))[0], x * a + b)
    (flat_runner,) = runner.structured.values()
    assert flat_runner.replays == 2 and runner.eager_calls == 0


def test_one_level_structures_round_trip():
    a, b, c = torch.randn(1), torch.randn(2), torch.randn(3)
    flat, layout = cudagraphs.flatten_one_level([a, (b, c), None, [c]])
    assert flat == [a, b, c, None, c] and layout == (None, (tuple, 2), None, (list, 1))
    rebuilt = cudagraphs.rebuild_one_level(flat, layout)
    assert rebuilt[0] is a and rebuilt[1] == (b, c) and rebuilt[2] is None and rebuilt[3] == [c]
    assert cudagraphs.flatten_one_level([((a,),)]) is None  # deeper: pytree's business
    flat, rebuild = cudagraphs.flatten((a, (b, c)))
    assert flat == [a, b, c] and rebuild(flat) == (a, (b, c))


def test_saved_outputs_holding_tuples_are_handed_out_in_place():
    def forward(x):
        return (x + 1, (x * 2, x * 3), x * 4)  # one output, then two saved values, the first a pair

    runner = FakeDeviceRunner(forward, kind="forward", saved_outputs=2)
    with torch.no_grad():
        runner(torch.randn(3))
    recording = next(iter(runner.recordings.values()))
    assert recording.first_saved == 1 and recording.protected == [1, 2, 3]


def test_parameter_written_in_place_runs_eagerly_with_reason():
    weight = torch.nn.Parameter(torch.ones(3), requires_grad=False)

    def step(w, x):
        w.add_(x)
        return (w * 2,)

    runner = FakeDeviceRunner(step, name="g")
    runner(weight, torch.ones(3))
    torch.testing.assert_close(weight, torch.full((3,), 2.0))
    assert runner.eager_calls == 1 and runner.replays == 0
    assert any("writes in place to input 0" in line for line in logs.recent("cudagraphs"))


def test_shapes_are_bounded_and_logged():
    runner = FakeDeviceRunner(lambda x: (x + 1,), settings=Settings(max_shapes=2), name="g")
    for size in (2, 3, 4, 4, 2):
        (result,) = runner(torch.zeros(size))
        torch.testing.assert_close(result, torch.ones(size))
    assert runner.replays == 3 and runner.eager_calls == 2
    assert sum("more than 2 input shapes" in line for line in logs.recent("cudagraphs")) == 1


def test_moved_parameters_are_bounded_per_shape():
    runner = FakeDeviceRunner(lambda w, x: (w * x,), settings=Settings(max_recordings_per_shape=2), name="g")
    x = torch.randn(3)
    weights = [torch.nn.Parameter(torch.randn(3), requires_grad=False) for _ in range(3)]  # alive: 3 addresses
    for weight in weights:
        torch.testing.assert_close(runner(weight, x)[0], weight * x)
    assert runner.replays == 2 and runner.eager_calls == 1
    assert any("changed more than 2 times" in line for line in logs.recent("cudagraphs"))


def test_parameters_are_read_in_place():
    weight = torch.nn.Parameter(torch.randn(4), requires_grad=False)
    runner = FakeDeviceRunner(lambda w, x: (x * w,))
    x = torch.randn(4)
    runner(weight, x)
    with torch.no_grad():
        weight.mul_(3)  # an optimizer step
    torch.testing.assert_close(runner(weight, x)[0], x * weight)
    recording = next(iter(runner.recordings.values()))
    assert recording.copied == [1] and recording.static_inputs[0] is None  # not pinned


def test_module_buffers_are_read_in_place():
    def backend(gm, example_inputs):
        backend.indices = cudagraphs.module_state_indices(gm)
        return gm.forward

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3)).eval()
    tensorjit.compile(model, backend=backend)(torch.randn(2, 3))
    assert backend.indices == frozenset(range(1, 7))  # not the input, every parameter and buffer

    mean = torch.randn(4)  # a plain tensor, as a batch-norm buffer is
    runner = FakeDeviceRunner(lambda x, m: (x - m,), static_input_indices=frozenset({1}))
    for _ in range(2):
        x = torch.randn(4)
        torch.testing.assert_close(runner(x, mean)[0], x - mean)
        mean.add_(1)
    assert next(iter(runner.recordings.values())).copied == [0] and runner.replays == 2


def test_only_kept_outputs_are_handed_out():
    runner = FakeDeviceRunner(lambda x: (x + 1, x * 2), kept_outputs=1)
    first = runner(torch.zeros(2))
    second = runner(torch.ones(2))
    assert runner.revoked[0][0] == first[0].untyped_storage()._cdata  # kept: handed out, revoked when overwritten
    assert first[1] is second[1]  # a mutated input's new value, which the runtime copies at once


def test_without_revoking_kept_outputs_are_cloned():
    class Cloning(FakeDeviceRunner):
        hands_out = False  # a torch that cannot revoke a storage

    runner = Cloning(lambda x: (x + 1,))
    (first,) = runner(torch.zeros(2))
    runner(torch.ones(2))
    torch.testing.assert_close(first, torch.ones(2))  # its own call's value
    assert next(iter(runner.recordings.values())).lease is None


def test_capture_failure_runs_eagerly_with_reason():
    class Failing(FakeDeviceRunner):
        def _capture(self, static_inputs, pool):
            raise RuntimeError("operation not permitted when stream is capturing\nmore")

    runner = Failing(lambda x: (x.sum().item() * x,), name="g")
    torch.testing.assert_close(runner(torch.ones(2))[0], torch.full((2,), 2.0))
    assert runner.eager_calls == 1
    assert logs.recent("cudagraphs")[-1].endswith("capture failed (RuntimeError: operation not permitted when "
                                                  "stream is capturing)")


# -- training: forward and backward graphs -------------------------------------------------


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 4)

    def forward(self, x):
        return (self.second(torch.tanh(self.first(x))),)


def compiled_net(model, wrap):
    """Net's graph through aot_compile (parameters as inputs, as capture lifts them), wrapped by `wrap`."""
    parameters = list(model.parameters())
    gm = torch.fx.symbolic_trace(lambda w1, b1, w2, b2, x: (
        torch.nn.functional.linear(torch.tanh(torch.nn.functional.linear(x, w1, b1)), w2, b2),))
    example = [*parameters, torch.randn(5, 8)]
    compiled = aot_compile(gm, example, fw_compiler=lambda g, e: g.forward, wrap_compiled=wrap)
    return lambda x: compiled(*parameters, x)


def test_training_steps_match_eager_and_backward_reads_saved_activations_in_place():
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    wrap, runners = fake_wrapper()
    step = compiled_net(model, wrap)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(4):
        x = torch.randn(5, 8)
        loss = step(x)[0].square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected = reference(x)[0].square().mean()
        expected.backward()
        reference_optimizer.step()
        reference_optimizer.zero_grad()
        torch.testing.assert_close(loss, expected)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)
    forward, backward = runners
    assert (forward.kind, backward.kind) == ("forward", "backward")
    assert forward.replays == 4 and backward.replays == 4 and forward.eager_calls == backward.eager_calls == 0
    forward_recording = next(iter(forward.recordings.values()))
    backward_recording = next(iter(backward.recordings.values()))
    assert forward_recording.protected, "the forward hands saved activations to the backward"
    assert backward_recording.pool == forward_recording.pool  # one pool per step
    (key,) = backward.recordings  # one recording: the key learned at the first call finds it later
    assert backward.saved_input_indices, "the backward keys its saved activations by address in one pass"
    addresses = set(key[1] or ()) | {part for part in key[2:] if type(part) is int}
    saved = {forward_recording.static_outputs[i].data_ptr() for i in forward_recording.protected}
    assert saved <= addresses  # the backward's key holds their addresses: read in place
    assert len(backward_recording.copied) == 1  # the tangent alone is copied (a saved weight is read in place)


def test_second_forward_before_backward_runs_eagerly_and_both_gradients_are_right():
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    wrap, runners = fake_wrapper()
    step = compiled_net(model, wrap)
    step(torch.randn(5, 8))[0].sum().backward()  # record both graphs
    model.zero_grad()
    x1, x2 = torch.randn(5, 8), torch.randn(5, 8)
    (step(x1)[0].square().mean() + step(x2)[0].square().mean()).backward()  # gradient accumulation
    (reference(x1)[0].square().mean() + reference(x2)[0].square().mean()).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    forward = runners[0]
    assert forward.eager_calls == 1
    assert any("still held" in line for line in logs.recent("cudagraphs"))


def test_other_holders_of_saved_activations_do_not_stop_replays():
    # A backward graph may return a view of a saved activation, and its recording keeps that
    # view: only the step token (finished by the backward, dropped with the graph) counts.
    runner = FakeDeviceRunner(lambda x: (x + 1, x * 2), kind="forward", saved_outputs=1)
    with torch.no_grad():
        _, saved = runner(torch.randn(3))
        kept_view = saved.view(-1)
        runner.take_step_token().finish()
        runner(torch.randn(3))
        token = runner.take_step_token()
        runner(torch.randn(3))  # its token is alive and not finished: eager
        del token
        runner(torch.randn(3))  # the graph holding it was dropped: replay
    assert runner.replays == 3 and runner.eager_calls == 1 and kept_view.shape == (3,)


def test_forward_outputs_await_their_backward_even_without_saved_activations():
    # A later op may save a forward's output for its own backward (out.square()): a second
    # forward before that backward must not revoke it.
    runner = FakeDeviceRunner(lambda x: (x * 2,), kind="forward")
    with torch.no_grad():
        runner(torch.randn(3))
        token = runner.take_step_token()
        assert token is not None
        runner(torch.randn(3))  # the first step's backward has not run: eager
        token.finish()
        runner(torch.randn(3))
    assert runner.replays == 2 and runner.eager_calls == 1 and runner.revoked == []


def test_stale_backward_after_mark_step_begin_fails_loudly():
    torch.manual_seed(0)
    model = Net()
    wrap, runners = fake_wrapper()
    step = compiled_net(model, wrap)
    step(torch.randn(5, 8))[0].sum().backward()
    first = step(torch.randn(5, 8))[0].sum()
    tensorjit.cudagraph_mark_step_begin()
    second = step(torch.randn(5, 8))[0].sum()  # overwrites the activations `first` still holds
    assert runners[0].eager_calls == 0
    second.backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        first.backward()


# -- gradients handed out in place ---------------------------------------------------------


class HandingOutRunner(FakeDeviceRunner):
    hands_out_gradients = staticmethod(lambda: True)


@pytest.fixture
def native_extension():
    if native_guards.checker(default_config, wait=True) is None:
        pytest.skip("no native extension on this machine (no C++ compiler)")


def training_pair(runner_class=HandingOutRunner):
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    wrap, runners = fake_wrapper(runner_class=runner_class)
    return compiled_net(model, wrap), model, reference, runners


def train_step(step, model, reference, x):
    step(x)[0].square().mean().backward()
    reference(x)[0].square().mean().backward()


def static_gradient_addresses(runners):
    backward = runners[1]
    (recording,) = backward.recordings.values()
    return recording, {v.untyped_storage().data_ptr() for v in recording.static_outputs if isinstance(v, torch.Tensor)}


def test_gradients_are_handed_out_without_a_copy(native_extension):
    step, model, reference, runners = training_pair()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(4):
        train_step(step, model, reference, torch.randn(5, 8))
        recording, static = static_gradient_addresses(runners)
        assert {p.grad.untyped_storage().data_ptr() for p in model.parameters()} <= static  # the pool's own
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
        optimizer.step()
        reference_optimizer.step()
        optimizer.zero_grad()  # set to None: nothing outlives the step, nothing moves
        reference_optimizer.zero_grad()
    assert runners[1].replays == 4 and recording.gradients is not None and recording.gradients.moved == 0
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


@pytest.mark.parametrize("keep", ["accumulate", "zero_in_place"])
def test_gradients_that_outlive_their_step_are_moved_before_the_next_replay(native_extension, keep):
    # Without the move the next backward replay writes its gradient into the buffer a .grad
    # still views, and accumulating into it doubles that gradient.
    step, model, reference, runners = training_pair()
    for _ in range(3):
        train_step(step, model, reference, torch.randn(5, 8))
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
        if keep == "zero_in_place":
            model.zero_grad(set_to_none=False)
            reference.zero_grad(set_to_none=False)
    recording, static = static_gradient_addresses(runners)
    assert not {p.grad.untyped_storage().data_ptr() for p in model.parameters()} & static
    assert recording.gradients is None, "after a move the recording clones its gradients"
    assert any("outlived their step" in line for line in logs.recent("cudagraphs"))


def test_a_view_of_a_handed_out_gradient_keeps_its_values(native_extension):
    step, model, reference, runners = training_pair()
    train_step(step, model, reference, torch.randn(5, 8))
    weight = model.first.weight
    view, expected = weight.grad.view(-1), weight.grad.clone().view(-1)
    model.zero_grad()
    train_step(step, model, reference, torch.randn(5, 8))  # replays write new gradients into the pool
    torch.testing.assert_close(view, expected)
    assert view.untyped_storage().data_ptr() not in static_gradient_addresses(runners)[1]


def test_gradients_are_cloned_until_the_extension_is_loaded(native_extension):
    loaded = [False]

    class Later(FakeDeviceRunner):
        hands_out_gradients = staticmethod(lambda: loaded[0])

    step, model, reference, runners = training_pair(Later)
    train_step(step, model, reference, torch.randn(5, 8))
    model.zero_grad()
    train_step(step, model, reference, torch.randn(5, 8))
    recording, static = static_gradient_addresses(runners)
    assert not {p.grad.untyped_storage().data_ptr() for p in model.parameters()} & static  # cloned
    loaded[0] = True
    model.zero_grad()
    reference.zero_grad()
    train_step(step, model, reference, torch.randn(5, 8))
    assert {p.grad.untyped_storage().data_ptr() for p in model.parameters()} <= static
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_a_pure_function_warms_up_on_its_inputs_and_any_other_on_copies():
    seen = []

    class Watching(FakeDeviceRunner):
        def _run_warm_up_calls(self, copies):
            seen.append(copies)
            return super()._run_warm_up_calls(copies)

    weight, x = torch.nn.Parameter(torch.randn(3)), torch.randn(3)
    with torch.no_grad():
        for pure in (True, False):
            Watching(lambda w, v: (w * v,), static_input_indices=frozenset({0}), pure=pure)(weight, x)
    (pure_inputs, copied_inputs) = seen
    assert pure_inputs[0] is weight and pure_inputs[1] is x  # no copy of the parameters (GPT-2: 500 MB)
    assert copied_inputs[0] is not weight and copied_inputs[1] is not x
    assert copied_inputs[0].data_ptr() != weight.data_ptr()


def test_compiled_graphs_are_wrapped_as_pure():
    wrap = cudagraphs.wrap_compiled(Settings())
    for kind in ("forward", "backward"):
        assert wrap(lambda *a: a, kind).pure
    assert cudagraphs.CudaGraphRunner(lambda x: x).pure is False  # any callable may write its inputs


# -- options and wiring --------------------------------------------------------------------


def test_modes_and_options_reach_the_runner():
    assert MODES["reduce-overhead"]["triton_cudagraphs"]
    config = Config(triton_cudagraphs=True, cudagraph_max_shapes=3, cudagraph_warmup_calls=1)
    assert cudagraph_wrapper(config, "cpu") is None and cudagraph_wrapper(Config(), "cuda") is None
    runner = cudagraph_wrapper(config, "cuda")(lambda x: x, "forward", 2)
    assert isinstance(runner, CudaGraphRunner)
    assert (runner.kind, runner.saved_outputs, runner.settings) == ("forward", 2, Settings(3, 2, 1))
    assert "cudagraphs" in logs.KINDS


def test_aot_compile_wraps_each_compiled_graph_by_kind():
    wrap, runners = fake_wrapper()
    gm = torch.fx.symbolic_trace(lambda w, x: (torch.sin(x * w),))
    weight = torch.randn(3, requires_grad=True)
    aot_compile(gm, [weight, torch.randn(3)], fw_compiler=lambda g, e: g.forward, wrap_compiled=wrap)
    assert [r.kind for r in runners] == ["forward", "backward"] and runners[0].saved_outputs >= 1
    with torch.no_grad():
        aot_compile(gm, [weight, torch.randn(3)], fw_compiler=lambda g, e: g.forward, wrap_compiled=wrap)
    assert runners[-1].kind == "inference"


def test_mark_step_begin_is_exported():
    before = cudagraphs.current_step()
    tensorjit.cudagraph_mark_step_begin()
    assert cudagraphs.current_step() == before + 1


class GeneratedGraph:
    """Stands for the code generator's runner, which counts its launches (codegen.memory.launches)."""

    def __init__(self, *steps):
        self.launches = len(steps)

    def __call__(self, x):
        return (x + 1,)


def test_inference_graphs_of_one_launch_run_unrecorded():
    wrap = cudagraphs.wrap_compiled(Settings(), name="g")
    one = GeneratedGraph("addmm")
    assert wrap(one, "inference") is one
    assert logs.recent("cudagraphs") == [
        "g (inference): runs without a CUDA graph: it launches 1 kernel; a replay costs more host time "
        "than that (graphs of 2 launches or more are recorded)"]
    assert isinstance(wrap(GeneratedGraph("mm", "gelu"), "inference"), CudaGraphRunner)
    assert isinstance(wrap(one, "forward"), CudaGraphRunner)  # its backward reads its saved outputs in place
    assert isinstance(wrap(lambda x: (x,), "inference"), CudaGraphRunner)  # launches unknown: recorded


def test_a_warm_up_marked_incomplete_runs_eagerly_and_warms_up_again():
    requests = ["one more warm-up"]  # an autotuner wanting a second look (torch.compiler's name for it)

    def function(x):
        if requests:
            requests.pop()
            tensorjit.compiler.cudagraph_mark_warmup_incomplete()
        return (x * 2,)

    runner = FakeDeviceRunner(function)
    x = torch.ones(3)
    torch.testing.assert_close(runner(x)[0], x * 2)
    assert not runner.recordings and runner.eager_calls == 1  # nothing recorded, the call ran eagerly
    torch.testing.assert_close(runner(x)[0], x * 2)  # warmed up again, then recorded
    assert len(runner.recordings) == 1 and runner.shapes == {cudagraphs.shape_of(next(iter(runner.recordings))): 1}
    tensorjit.compiler.cudagraph_mark_warmup_incomplete()  # outside a warm-up: nothing
    torch.testing.assert_close(runner(x)[0], x * 2)
    assert runner.replays == 2 and runner.eager_calls == 1
