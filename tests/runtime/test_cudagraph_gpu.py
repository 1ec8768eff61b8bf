"""mode="reduce-overhead" and backend="cudagraphs" on a GPU: replays match eager.

Training steps with an optimizer (losses and parameters), outputs held across
calls, inference_mode, no_grad, inputs mutated in place, gradient accumulation
and the loud failure of a stale backward.
"""

import copy

import pytest
import torch

import tensorjit
from tensorjit import logs
from tensorjit.capture import native_guards
from tensorjit.config import config as default_config
from tensorjit.runtime.cudagraphs import CudaGraphRunner

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SETTINGS = [dict(mode="reduce-overhead"), dict(backend="cudagraphs")]
IDS = ["reduce-overhead", "cudagraphs-backend"]


class Net(torch.nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(self.norm(x)))) + x


@pytest.fixture(autouse=True)
def fresh_state():
    tensorjit.reset()
    logs.clear()
    yield
    tensorjit.reset()


@pytest.fixture(params=["handed-out", "cloned"])
def gradients(request, monkeypatch):
    """Gradients handed out of the pool (the native extension loaded) or cloned (before it is)."""
    if request.param == "handed-out":
        if native_guards.checker(default_config, wait=True) is None:
            pytest.skip("no native extension on this machine (no C++ compiler)")
    else:
        monkeypatch.setattr(CudaGraphRunner, "hands_out_gradients", staticmethod(lambda: False))
    return request.param


def from_the_pool(tensor):
    """Whether `tensor`'s memory is a CUDA graph pool's, handed out (not the caching allocator's own)."""
    return not torch._C._has_Standard_Deleter(tensor.untyped_storage()._cdata)


def recorded(kind):
    return [line for line in logs.recent("cudagraphs") if "recorded a CUDA graph" in line and f"({kind})" in line]


@pytest.mark.parametrize("settings", SETTINGS, ids=IDS)
def test_training_steps_with_optimizer_match_eager(settings, gradients):
    torch.manual_seed(0)
    model = Net().cuda()
    reference = copy.deepcopy(model)
    compiled = tensorjit.compile(model, **settings)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    for step in range(5):
        x = torch.randn(8, 16, 64, device="cuda")
        loss = compiled(x).square().mean()
        loss.backward()
        if step:  # replayed: the gradients are the pool's own where handed out
            assert [from_the_pool(p.grad) for p in model.parameters()] == \
                [gradients == "handed-out"] * len(list(model.parameters()))
        optimizer.step()
        optimizer.zero_grad()
        expected = reference(x).square().mean()
        expected.backward()
        reference_optimizer.step()
        reference_optimizer.zero_grad()
        torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    # AdamW divides by the root of the squared gradients, so float32 rounding differences of the
    # generated kernels in near-zero gradients reach the parameters at ~2e-5 after 5 steps (seen on
    # the H100); a replay of stale values would be off by the size of a whole update (~1e-2).
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)
    assert recorded("forward") and recorded("backward"), logs.recent("cudagraphs")
    assert not [line for line in logs.recent("cudagraphs") if "not replayed" in line], logs.recent("cudagraphs")


@pytest.mark.parametrize("settings", SETTINGS, ids=IDS)
@pytest.mark.parametrize("context", [torch.inference_mode, torch.no_grad], ids=["inference_mode", "no_grad"])
def test_inference_outputs_held_across_calls(settings, context):
    torch.manual_seed(0)
    model = Net().cuda().eval()
    compiled = tensorjit.compile(model, **settings)
    held, cloned = [], []
    with context():
        for _ in range(4):
            x = torch.randn(4, 16, 64, device="cuda")
            result = compiled(x)
            held.append((x, result, result[1:].transpose(0, 1)))  # the output and a view taken before the next call
            cloned.append((x, result.clone()))
        x, result, view = held[-1]
        torch.testing.assert_close(result, model(x), rtol=1e-4, atol=1e-4)  # the last output is valid
        torch.testing.assert_close(view, model(x)[1:].transpose(0, 1), rtol=1e-4, atol=1e-4)
        for x, result, view in held[:-1]:  # overwritten by a later call: reading fails loudly, views too
            for tensor in (result, view):
                with pytest.raises(RuntimeError, match="a later call of it has overwritten it"):
                    tensor.sum()
        for x, copy in cloned:  # a clone keeps its call's values
            torch.testing.assert_close(copy, model(x), rtol=1e-4, atol=1e-4)
    assert recorded("inference"), logs.recent("cudagraphs")


def test_training_outputs_are_handed_out_and_revoked_when_overwritten():
    torch.manual_seed(0)
    model = Net().cuda()
    reference = copy.deepcopy(model)
    compiled = tensorjit.compile(model, mode="reduce-overhead")
    outputs = []
    for _ in range(3):
        x = torch.randn(8, 16, 64, device="cuda")
        output = compiled(x)
        output.square().mean().backward()
        expected = reference(x)
        expected.square().mean().backward()
        torch.testing.assert_close(output, expected, rtol=1e-4, atol=1e-5)
        outputs.append(output)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4)  # gradients are cloned, and accumulate
    for output in outputs[:-1]:
        with pytest.raises(RuntimeError, match="a later call of it has overwritten it"):
            output.sum()
    assert recorded("forward"), logs.recent("cudagraphs")


@pytest.mark.parametrize("settings", SETTINGS, ids=IDS)
def test_inputs_mutated_in_place(settings):
    def step(x, y):
        x.mul_(2)
        return x + y

    compiled = tensorjit.compile(step, **settings)
    with torch.no_grad():
        for _ in range(3):
            x, y = torch.randn(32, device="cuda"), torch.randn(32, device="cuda")
            expected_x = x * 2
            result = compiled(x, y)
            torch.testing.assert_close(x, expected_x)
            torch.testing.assert_close(result, expected_x + y)


def test_gradient_accumulation_over_two_forwards(gradients):
    torch.manual_seed(0)
    model = Net().cuda()
    reference = copy.deepcopy(model)
    compiled = tensorjit.compile(model, mode="reduce-overhead")
    compiled(torch.randn(8, 16, 64, device="cuda")).sum().backward()  # record
    model.zero_grad()
    x1, x2 = torch.randn(8, 16, 64, device="cuda"), torch.randn(8, 16, 64, device="cuda")
    (compiled(x1).square().mean() + compiled(x2).square().mean()).backward()
    (reference(x1).square().mean() + reference(x2).square().mean()).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert any("still held" in line for line in logs.recent("cudagraphs"))


def test_stale_backward_after_mark_step_begin_fails_loudly():
    model = Net().cuda()
    compiled = tensorjit.compile(model, mode="reduce-overhead")
    compiled(torch.randn(8, 16, 64, device="cuda")).sum().backward()
    first = compiled(torch.randn(8, 16, 64, device="cuda")).sum()
    tensorjit.cudagraph_mark_step_begin()
    second = compiled(torch.randn(8, 16, 64, device="cuda")).sum()
    second.backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        first.backward()


def test_cpu_tensor_in_graph_is_logged_and_correct():
    def step(x):
        return x.cpu() * 2  # an output on the CPU: nothing to record

    compiled = tensorjit.compile(step, backend="cudagraphs")
    with torch.no_grad():
        x = torch.randn(8, device="cuda")
        torch.testing.assert_close(compiled(x), x.cpu() * 2)
    assert any("on the CPU" in line for line in logs.recent("cudagraphs")), logs.recent("cudagraphs")


@pytest.fixture
def full_float32_convolutions():
    """cuDNN convolutions default to TF32 (10-bit mantissa): eager's NCHW and the compiled
    channels-last convolutions then round differently by ~1e-3, which training amplifies; the
    comparison is meant at float32 precision."""
    cudnn = torch.backends.cudnn
    # The flags() context, not an assignment: torch's OpInfo tests (tests/ops) import its test
    # utilities, which freeze the global flags for the rest of the process.
    with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                     allow_tf32=False):
        yield


@pytest.mark.parametrize("set_to_none", [True, False])
def test_batched_gradient_copies_and_statistics_match_eager(set_to_none, full_float32_convolutions, gradients):
    """Ten parameters (gradients copied out in one batch) and batch-norm statistics (written back
    with one foreach copy), gradients accumulated over two steps and zeroed in place or dropped."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10)).cuda()
    reference = copy.deepcopy(model)
    compiled = tensorjit.compile(model, mode="reduce-overhead")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=1e-2, momentum=0.9)
    for step in range(6):
        x = torch.randn(4, 3, 8, 8, device="cuda")
        for function, opt in ((compiled, optimizer), (reference, reference_optimizer)):
            function(x).square().mean().backward()
            if step % 2:  # gradients of two steps accumulate, then one update
                opt.step()
                opt.zero_grad(set_to_none=set_to_none)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    for b, c in zip(model.buffers(), reference.buffers()):
        torch.testing.assert_close(b, c, rtol=1e-4, atol=1e-5)
    assert recorded("backward"), logs.recent("cudagraphs")


def test_warm_up_leaves_no_memory_cached_beside_the_pool():
    """Warm-up runs in the recording's pool: the activations the recording takes are reserved
    once, not again for the warm-up's activations cached outside it (resnet50: 700 MB against 304)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 256)).cuda()
    x = torch.randn(16384, 256, device="cuda")
    hidden = 16384 * 4096 * 4  # 256 MiB; the inputs, parameters and output are 24 MiB
    compiled = tensorjit.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        expected = model(x)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        reserved = torch.cuda.memory_reserved()
        for _ in range(3):
            out = compiled(x)
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)
    assert recorded("inference")
    grown = torch.cuda.memory_reserved() - reserved
    # The pool (the hidden activation, outputs) and the inputs' copies: about 1.35x the hidden
    # activation; warm-up outside the pool cached its activations again (about 2.4x).
    assert grown <= 1.8 * hidden, grown / hidden


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_one_launch_inference_runs_without_a_recording(mode):
    model = torch.nn.Linear(256, 512).cuda()
    compiled = tensorjit.compile(model, mode=mode)
    with torch.inference_mode():
        first = compiled(torch.randn(32, 256, device="cuda"))
        x = torch.randn(32, 256, device="cuda")
        second = compiled(x)
        torch.testing.assert_close(second, model(x))
    assert first.data_ptr() != second.data_ptr()  # nothing replayed over the first call's output
    assert not recorded("inference")
    assert any("runs without a CUDA graph: it launches 1 kernel" in line for line in logs.recent("cudagraphs"))


def test_static_input_copies_live_in_the_recordings_pool(monkeypatch):
    """A copied input's static buffer (here the backward's tangent, made by eager code each step)
    is allocated from the recording's pool, not from the caller's cached blocks, where it split
    the block the eager loss reused every step and made it allocate a new one (GPT-2 training:
    394 MB more reserved)."""
    from tensorjit.runtime import cudagraphs
    made = []

    def static_copy(value):
        buffer = real_copy(value)
        made.append(buffer.untyped_storage().data_ptr())
        return buffer

    real_copy = cudagraphs.static_copy
    monkeypatch.setattr(cudagraphs, "static_copy", static_copy)
    torch.manual_seed(0)
    model = Net().cuda()
    compiled = tensorjit.compile(model, mode="reduce-overhead")
    for _ in range(3):
        loss = compiled(torch.randn(8, 16, 64, device="cuda")).float().square().mean()
        loss.backward()
        model.zero_grad()
    assert recorded("backward"), logs.recent("cudagraphs")
    pools = {}
    for segment in torch.cuda.memory_snapshot():
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                pools[block["address"]] = tuple(segment.get("segment_pool_id", (0, 0)))
    live = [address for address in made if address in pools]  # warm-up's copies are freed
    assert live, "no static copy alive: nothing was copied"
    assert all(pools[address] != (0, 0) for address in live), [pools[a] for a in live]


def test_outputs_of_one_recording_end_at_a_replay_of_another_in_its_pool():
    """Recordings of one inference runner (shapes of a dynamic graph) share a pool, where the second's
    outputs may lie in the first's intermediates: a replay of the first ends the second's outputs
    loudly (as torch.compile ends every earlier output at a call), never by overwriting them."""
    runner = CudaGraphRunner(lambda x: ((x * 2).sin() + 1,), kind="inference")
    small, large = torch.randn(64, 256, device="cuda"), torch.randn(96, 256, device="cuda")
    for _ in range(3):
        runner(small)
        held = runner(large)[0]
    expected = (large * 2).sin() + 1
    runner(small)
    assert len(runner.recordings) == 2 and runner.replays >= 2
    with pytest.raises(RuntimeError, match="clone it"):
        torch.testing.assert_close(held, expected)
    kept = runner(large)[0].clone()
    runner(small)
    torch.testing.assert_close(kept, expected)


def test_a_dropped_model_leaves_no_memory_allocated_in_its_pool():
    """cuBLAS's workspaces made on the capture stream at warm-up or capture live in the recording's
    pool: they are freed after each (else 65 MB stayed allocated there for the process's life)."""
    def allocated_in_graph_pools():
        return sum(segment["allocated_size"] for segment in torch.cuda.memory_snapshot()
                   if tuple(segment.get("segment_pool_id", (0, 0))) != (0, 0))

    torch._C._cuda_clearCublasWorkspaces()  # earlier tests' workspaces of the capture stream
    torch.cuda.synchronize()
    before = allocated_in_graph_pools()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
    compiled = tensorjit.compile(model, mode="reduce-overhead")
    for _ in range(3):
        compiled(torch.randn(64, 256, device="cuda")).square().mean().backward()
        model.zero_grad()
    assert recorded("forward") and recorded("backward"), logs.recent("cudagraphs")
    del compiled
    tensorjit.reset()
    import gc
    gc.collect()
    torch.cuda.synchronize()
    assert allocated_in_graph_pools() == before
