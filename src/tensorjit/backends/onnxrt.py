"""The `onnxrt` backend: export the graph to ONNX and run it with onnxruntime.

Takes (gm: torch.fx.GraphModule, example_inputs) per the backend contract and
returns a callable with gm's signature. The graph is exported with PyTorch's
TorchScript-based exporter (`torch.onnx.export(..., dynamo=False)`; the newer
exporter goes through torch.export, which tensorjit must not use), once per
distinct set of input shapes and dtypes, and run by an onnxruntime
InferenceSession on the CUDA execution provider when the inputs are on a GPU
and that provider is available, else on the CPU provider.

CUDA tensors are bound to the session in place (IO binding: no host round
trip); outputs are allocated by torch and written by onnxruntime.

Runs gm eagerly instead, with the reason logged, when ONNX cannot give the
same answer: inputs that need gradients while grad is enabled, graphs that
write their inputs in place, outputs that are not tensors, dtypes onnxruntime
the exporter and providers handle unevenly (bfloat16), and failed exports.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import warnings
from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree as pytree

log = logging.getLogger(__name__)


class OnnxRuntimeUnavailable(ImportError):
    """onnxruntime is not installed; the backend cannot run without it."""

    def __init__(self) -> None:
        super().__init__(
            "tensorjit: the 'onnxrt' backend needs onnxruntime, which is not installed. "
            "Hint: pip install onnxruntime (or onnxruntime-gpu for the CUDA execution provider)."
        )


def onnxrt(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """Backend entry point: a callable that runs gm through onnxruntime."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as error:
        raise OnnxRuntimeUnavailable() from error
    del example_inputs  # sessions are built from each call's real inputs
    return OnnxRuntimeRunner(gm)


@dataclasses.dataclass
class Session:
    """One exported graph, for one set of input shapes and dtypes."""

    session: Any
    input_indices: list[int]
    """Which call inputs the ONNX graph still reads (the exporter drops unused ones)."""
    input_names: list[str]
    output_names: list[str]
    outputs: list[torch.Tensor]
    """Meta tensors: shape, dtype and layout of each output."""
    output_spec: pytree.TreeSpec
    device: torch.device
    """Where the caller's tensors live."""
    run_device: torch.device
    """Where onnxruntime reads and writes them: the CPU when no CUDA provider is installed."""


class OnnxRuntimeRunner:
    """Calls gm through onnxruntime sessions, one per input signature."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.sessions: dict[tuple, Session | None] = {}
        self.eager_calls = 0

    def __call__(self, *inputs: Any) -> Any:
        reason = _eager_reason(inputs, self.gm)
        key = _signature(inputs) if reason is None else None
        if reason is None and key not in self.sessions:
            self.sessions[key] = self._build(inputs)
        session = self.sessions.get(key)
        if session is None:
            self.eager_calls += 1
            if reason:
                log.info("onnxrt: running eagerly: %s", reason)
            return self.gm(*inputs)
        return _run(session, inputs)

    def _build(self, inputs: Sequence[torch.Tensor]) -> Session | None:
        try:
            return _build_session(self.gm, inputs)
        except Exception as error:  # noqa: BLE001 - export refusals fall back to eager
            log.warning("onnxrt: running eagerly: export or session failed: %s: %s", type(error).__name__, error)
            return None


def _eager_reason(inputs: Sequence[Any], gm: torch.nn.Module) -> str | None:
    if not all(isinstance(value, torch.Tensor) for value in inputs):
        return "an input is not a tensor"
    if torch.is_grad_enabled() and any(value.requires_grad for value in [*inputs, *gm.parameters()]):
        return "an input or parameter requires grad (onnxruntime computes no gradients)"
    return None


def _signature(inputs: Sequence[torch.Tensor]) -> tuple:
    return tuple((value.shape, value.dtype, value.device) for value in inputs)


def _build_session(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]) -> Session | None:
    import onnxruntime

    probe = [value.detach().clone() for value in inputs]
    versions = [value._version for value in probe]
    with torch.no_grad():
        outputs = gm(*probe)
    if any(value._version != versions[index] for index, value in enumerate(probe)):
        log.info("onnxrt: running eagerly: the graph writes an input in place")
        return None
    flat_outputs, output_spec = pytree.tree_flatten(outputs)
    if not flat_outputs or not all(isinstance(value, torch.Tensor) for value in flat_outputs):
        log.info("onnxrt: running eagerly: an output is not a tensor")
        return None
    device = inputs[0].device if inputs else torch.device("cpu")
    if any(v.dtype == torch.bfloat16 for v in [*inputs, *flat_outputs]):
        log.info("onnxrt: running eagerly: the exporter and providers handle bfloat16 unevenly")
        return None
    input_names = [f"input_{index}" for index in range(len(inputs))]
    output_names = [f"output_{index}" for index in range(len(flat_outputs))]
    model = _export(gm, probe, input_names, output_names)
    providers = _providers(device)
    run_device = device if providers[0] == "CUDAExecutionProvider" else torch.device("cpu")
    if device.type == "cuda" and run_device.type == "cpu":
        log.info("onnxrt: no CUDA execution provider; CUDA tensors go through the CPU provider")
    session = onnxruntime.InferenceSession(model, providers=providers)
    kept = [entry.name for entry in session.get_inputs()]
    return Session(
        session=session,
        input_indices=[input_names.index(name) for name in kept],
        input_names=kept,
        output_names=output_names,
        outputs=[value.to("meta") for value in flat_outputs],
        output_spec=output_spec,
        device=device,
        run_device=run_device,
    )


def _export(gm, inputs, input_names, output_names) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            gm, tuple(inputs), buffer, dynamo=False, input_names=input_names, output_names=output_names
        )
    return buffer.getvalue()


def _providers(device: torch.device) -> list[str]:
    import onnxruntime

    available = onnxruntime.get_available_providers()
    if device.type == "cuda" and "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def _run(session: Session, inputs: Sequence[torch.Tensor]) -> Any:
    binding = session.session.io_binding()
    bound = [inputs[index].to(session.run_device).contiguous() for index in session.input_indices]
    for name, value in zip(session.input_names, bound):
        _bind(binding.bind_input, name, value)
    outputs = [torch.empty(value.shape, dtype=value.dtype, device=session.run_device) for value in session.outputs]
    for name, value in zip(session.output_names, outputs):
        _bind(binding.bind_output, name, value)
    if session.run_device.type == "cuda":
        # onnxruntime runs on its own stream; make it see torch's finished writes.
        torch.cuda.current_stream().synchronize()
    session.session.run_with_iobinding(binding)
    if session.run_device != session.device:
        outputs = [value.to(session.device) for value in outputs]
    return pytree.tree_unflatten(outputs, session.output_spec)


def _bind(bind: Callable[..., None], name: str, value: torch.Tensor) -> None:
    device_type = "cuda" if value.device.type == "cuda" else "cpu"
    device_index = value.device.index or 0
    bind(name, device_type, device_index, _numpy_dtype(value.dtype), list(value.shape), value.data_ptr())


def _numpy_dtype(dtype: torch.dtype):
    # bfloat16 never reaches here (runs eagerly); numpy names every other dtype.
    return torch.empty((), dtype=dtype).numpy().dtype.type
