"""Replaying a function's CUDA work through recorded CUDA graphs.

`CudaGraphRunner(function)` takes a function of tensors (a compiled graph, a
GraphModule, any callable returning a tensor or a tuple/list of tensors) and
returns a callable with the same signature that, on CUDA inputs, replays a
`torch.cuda.CUDAGraph` recorded from it instead of launching its kernels one by
one. It is what the `cudagraphs` backend returns and what the inductor backend
wraps its compiled callable in under mode="reduce-overhead"
(`Config.triton_cudagraphs`).

How a call goes:
  * Inputs not all on one CUDA device, or gradients being recorded through an
    input that requires grad: run `function` eagerly (a CUDA graph cannot
    record autograd's tape; the training path records forward and backward
    graphs separately, after the autograd stage has split them).
  * Otherwise look up a recording by the inputs' shapes, strides, dtypes and,
    for parameters, addresses. None yet: warm up on a side stream (so lazy
    initialisation, cuBLAS workspaces and autotuning happen outside the
    capture), then record. More than `max_recordings` distinct keys: eager.
  * Copy the non-parameter inputs into the recording's static input buffers,
    replay, copy back inputs the function mutates in place, return outputs.

Parameters (`nn.Parameter` inputs, as the capture stage lifts them) are read
in place at their own address instead of copied: they are large and rarely
move; an optimizer updating them in place is seen by the next replay. If one
is reallocated, its new address is a new key and a new recording.

Outputs. A replay writes its outputs into the same static buffers every time,
so a returned static buffer would silently change under a caller still
holding it when the next call replays. We clone outputs by default
(`clone_outputs=True`): one device copy per output, correct for every caller.
Callers that consume each result before calling again (a benchmark loop, a
runtime wrapper that copies into its own buffers) may pass
`clone_outputs=False` and get the static buffers, valid until the next call.
torch.compile's cudagraph trees instead hand out the static buffers and fail
loudly when an overwritten one is read; we prefer the copy to the trap.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree as pytree

WARMUP_CALLS = 2
"""Eager calls on a side stream before recording: the first call may allocate
workspaces or autotune, which must not happen inside the capture."""


@dataclasses.dataclass
class Recording:
    """One recorded graph and the buffers it reads and writes."""

    graph: torch.cuda.CUDAGraph
    static_inputs: list[torch.Tensor]
    copied: list[int]
    """Indices of inputs copied into static buffers before each replay."""
    mutated: list[int]
    """Indices of inputs the function writes in place; copied back after replay."""
    static_outputs: list[torch.Tensor]
    output_spec: pytree.TreeSpec


class CudaGraphRunner:
    """Calls `function` through CUDA graph replays; see the module docstring."""

    def __init__(self, function: Callable[..., Any], *, clone_outputs: bool = True, max_recordings: int = 8):
        self.function = function
        self.clone_outputs = clone_outputs
        self.max_recordings = max_recordings
        self.recordings: dict[tuple, Recording | None] = {}
        self.eager_calls = 0
        self.replays = 0

    def __call__(self, *inputs: Any) -> Any:
        if not _graphable(inputs):
            self.eager_calls += 1
            return self.function(*inputs)
        key = _recording_key(inputs)
        if key not in self.recordings:
            if len(self.recordings) >= self.max_recordings:
                self.eager_calls += 1
                return self.function(*inputs)
            self.recordings[key] = self._record(inputs)
        recording = self.recordings[key]
        if recording is None:
            self.eager_calls += 1
            return self.function(*inputs)
        return self._replay(recording, inputs)

    def _record(self, inputs: Sequence[torch.Tensor]) -> Recording | None:
        """Warm up, then record; None when the function cannot be replayed safely."""
        mutated = self._warm_up(inputs)
        if any(_is_static(inputs[index]) for index in mutated):
            return None  # parameters written in place: replay would skip eager's write order checks
        copied = [index for index, value in enumerate(inputs) if not _is_static(value)]
        static_inputs = list(inputs)
        for index in copied:
            static_inputs[index] = _static_copy(inputs[index])
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=torch.cuda.graph_pool_handle()):
            outputs = self.function(*static_inputs)
        flat_outputs, output_spec = pytree.tree_flatten(outputs)
        return Recording(graph, static_inputs, copied, mutated, flat_outputs, output_spec)

    def _warm_up(self, inputs: Sequence[torch.Tensor]) -> list[int]:
        """Run on copies of every input on a side stream; return the indices it mutated.

        Copies, parameters included, so that warm-up never changes what the
        caller sees, whatever the function writes."""
        copies = [_static_copy(value) for value in inputs]
        versions = [value._version for value in copies]
        side_stream = torch.cuda.Stream()
        side_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side_stream):
            for _ in range(WARMUP_CALLS):
                self.function(*copies)
        torch.cuda.current_stream().wait_stream(side_stream)
        return [index for index, value in enumerate(copies) if value._version != versions[index]]

    def _replay(self, recording: Recording, inputs: Sequence[torch.Tensor]) -> Any:
        for index in recording.copied:
            if recording.static_inputs[index].data_ptr() != inputs[index].data_ptr():
                recording.static_inputs[index].copy_(inputs[index])
        recording.graph.replay()
        # Mutated inputs were written into the static copies; eager would have
        # written the caller's tensors.
        self.replays += 1
        for index in recording.mutated:
            inputs[index].copy_(recording.static_inputs[index])
        outputs = recording.static_outputs
        if self.clone_outputs:
            outputs = [_clone(value) for value in outputs]
        return pytree.tree_unflatten(outputs, recording.output_spec)


def _graphable(inputs: Sequence[Any]) -> bool:
    if not inputs or not all(isinstance(value, torch.Tensor) for value in inputs):
        return False
    devices = {value.device for value in inputs}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        return False
    if torch.is_grad_enabled() and any(value.requires_grad for value in inputs):
        return False
    return not torch.cuda.is_current_stream_capturing()


def _is_static(value: torch.Tensor) -> bool:
    return isinstance(value, torch.nn.Parameter)


def _recording_key(inputs: Sequence[torch.Tensor]) -> tuple:
    return tuple(
        (value.shape, value.stride(), value.dtype, value.device, value.data_ptr() if _is_static(value) else None)
        for value in inputs
    )


def _static_copy(value: torch.Tensor) -> torch.Tensor:
    # empty_strided keeps the caller's layout, so kernels recorded for it see
    # the same strides as the eager call would.
    buffer = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
    buffer.copy_(value)
    return buffer


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone(memory_format=torch.preserve_format)
    return value
