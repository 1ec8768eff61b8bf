"""Host cost of a mode="reduce-overhead" call, measured on the CPU.

Takes: model names (torchvision's, default densenet121,resnet50), --calls, --rounds.
Prints per model the microseconds of one compiled call (capture's guards, the
restore function, the autograd runtime and the CUDA graph runner's bookkeeping:
recording key, input copies, output clones) with the graph's device work faked
(a replay does nothing), then the same call without the runner and the runner
alone on the same inputs. The host work is device-independent Python, so it is
measured here; the GPU adds only the launch itself.

    PYTHONPATH=src python bench/cudagraph_host.py [densenet121,resnet50] [--calls 50 --rounds 15]

(torchvision's Python models are enough: its C extension is not needed.)
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

import tensorjit
from tensorjit.backends import inductor
from tensorjit.runtime.cudagraphs import CudaGraphRunner, Settings, module_state_indices


class HostOnlyRunner(CudaGraphRunner):
    """The runner's bookkeeping on CPU tensors; recording runs the graph, a replay launches nothing."""

    device_type = "cpu"

    def _new_pool(self):
        return "pool"

    def _warm_up_place(self, pool):
        return contextlib.nullcontext()

    def _run_warm_up_calls(self, copies):
        return self.function(*copies)

    def _capture(self, static_inputs, pool):
        return "graph", self.function(*static_inputs)

    def _launch(self, recording, inputs):
        pass


def host_only_wrapper(config, device, gm=None):
    if not config.triton_cudagraphs:
        return None
    static = module_state_indices(gm) if gm is not None else frozenset()

    def wrap(compiled, kind, saved_outputs=0, kept_outputs=None):
        return HostOnlyRunner(compiled, kind=kind, saved_outputs=saved_outputs, kept_outputs=kept_outputs,
                              static_input_indices=static if kind != "backward" else frozenset(),
                              settings=Settings())
    return wrap


def per_call(fn, args, calls: int, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def measure(name: str, calls: int, rounds: int) -> None:
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval()
    image = torch.randn(1, 3, 32, 32)
    runners: list[HostOnlyRunner] = []
    original_call = HostOnlyRunner.__call__

    def recording_call(self, *inputs):
        if self not in runners:
            runners.append(self)
        self.last_inputs = inputs
        return original_call(self, *inputs)
    HostOnlyRunner.__call__ = recording_call
    with torch.no_grad():
        compiled = tensorjit.compile(model, mode="reduce-overhead")
        for _ in range(4):
            compiled(image)
        HostOnlyRunner.__call__ = original_call
        whole = per_call(compiled, (image,), calls, rounds)
        runner = runners[-1]
        inputs = runner.last_inputs
        result = runner(*inputs)
        HostOnlyRunner.__call__ = lambda self, *ignored: result
        without_runner = per_call(compiled, (image,), calls, rounds)
        HostOnlyRunner.__call__ = original_call
        runner_alone = per_call(runner, inputs, calls, rounds)
    print(f"{name}: call {whole:7.1f} us   without the runner {without_runner:7.1f} us   "
          f"runner alone {runner_alone:6.1f} us   ({len(inputs)} graph inputs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="?", default="densenet121,resnet50")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    torch.set_num_threads(1)
    inductor.cudagraph_wrapper = host_only_wrapper  # CUDA graph runners on the CPU, device work faked
    inductor._code_generator = lambda device, config: (inductor._run_as_is, None)  # kernels never run per call
    for name in options.models.split(","):
        measure(name, options.calls, options.rounds)


if __name__ == "__main__":
    main()
