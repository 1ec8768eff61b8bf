"""aot_compile: a captured torch-level FX graph -> a callable with compiled forward and backward.

Pipeline, top to bottom:
  analyze         fake run: mutated inputs, outputs that are views, outputs needing grad
  forward         functional ATen forward (mutations -> returned new values)
  joint           forward + backward traced together through autograd
  partition       min-cut (or save-all) split into forward and backward graphs
  compile         fw_compiler(forward), bw_compiler(backward), inference_compiler(inference)
  runtime         autograd.Function for training, a plain function for inference
Anything this stage cannot handle runs the captured graph eagerly instead.
"""

from __future__ import annotations

import logging
from typing import Callable

import torch
import torch.fx as fx

from . import joint as joint_tracing
from .errors import AutogradUnsupported
from .metadata import GraphMetadata, analyze
from .partition import Partition, partition
from .runtime import RuntimePlan, inference_callable, training_callable

log = logging.getLogger(__name__)

Compiler = Callable[[fx.GraphModule, list], Callable]


def _example_from_meta(node: fx.Node):
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return value
    example = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
    return example.zero_()


def _placeholder_examples(graph_module: fx.GraphModule) -> list:
    return [_example_from_meta(n) for n in graph_module.graph.nodes if n.op == "placeholder"]


def _base_plan(metadata: GraphMetadata, signature, input_count: int) -> dict:
    aliases = tuple((i, a) for i, a in enumerate(metadata.output_aliases) if a is not None)
    return dict(input_count=input_count, output_count=metadata.output_count,
                returns_tuple=metadata.returns_tuple, kept_outputs=signature.kept_outputs,
                aliases=aliases, mutated_inputs=signature.mutated_inputs)


# Capture records `with torch.no_grad():` as calls that switch grad mode.
# Tracing to ATen drops them, and differentiating through a region eager ran
# without grad would give wrong gradients, so such training graphs run eagerly.
_GRAD_MODE_SWITCHES = (torch._C._set_grad_enabled, torch.set_grad_enabled)


def _refuse_grad_mode_switches(gm: fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _GRAD_MODE_SWITCHES:
            raise AutogradUnsupported(
                "grad_mode", f"{node.name} switches grad mode inside a graph with inputs requiring grad",
                "the graph runs eagerly")


class _Compiled:
    """Holds the traced forward and compiles the training or inference path on first need."""

    def __init__(self, gm, example_inputs, compilers, decompositions, partitioner):
        self.example_inputs = list(example_inputs)
        self.compilers = compilers
        self.decompositions = decompositions
        self.partitioner = partitioner
        self.metadata = analyze(gm, example_inputs)
        self.forward_gm, self.signature = joint_tracing.trace_functional_forward(
            gm, example_inputs, self.metadata)
        self.grad_inputs = tuple(i for i, x in enumerate(example_inputs)
                                 if isinstance(x, torch.Tensor) and x.requires_grad)
        if self.grad_inputs:
            _refuse_grad_mode_switches(gm)
        mutated_with_grad = set(self.grad_inputs) & set(self.signature.mutated_inputs)
        if mutated_with_grad:
            raise AutogradUnsupported(
                "mutation", f"inputs {sorted(mutated_with_grad)} require grad and are mutated in place",
                "the graph runs eagerly")
        self.training = None
        self.inference = None
        self.partition: Partition | None = None

    def compile_inference(self) -> Callable:
        _, _, inference_compiler = self.compilers
        graph = joint_tracing.retrace(self.forward_gm, self.example_inputs, self.decompositions)
        plan = RuntimePlan(**_base_plan(self.metadata, self.signature, len(self.example_inputs)))
        self.inference = inference_callable(plan, inference_compiler(graph, self.example_inputs))
        return self.inference

    def compile_training(self) -> Callable:
        forward_compiler, backward_compiler, _ = self.compilers
        kept = len(self.signature.kept_outputs)
        wanted = tuple(p for p, i in enumerate(self.signature.kept_outputs)
                       if self.metadata.output_requires_grad[i])
        joint_gm, joint_signature = joint_tracing.trace_joint(
            self.forward_gm, self.example_inputs, self.grad_inputs, wanted, self.decompositions)
        self.partition = partition(joint_gm, joint_signature, self.partitioner,
                                   self.signature.mutated_inputs)
        differentiable = joint_signature.differentiable_outputs
        outputs = joint_tracing.output_values(self.forward_gm)
        plan = RuntimePlan(
            **_base_plan(self.metadata, self.signature, len(self.example_inputs)),
            differentiable_outputs=differentiable, grad_inputs=self.grad_inputs,
            non_differentiable=tuple(p for p in range(kept) if p not in differentiable
                                     and outputs[p] is not None))
        forward = forward_compiler(self.partition.forward, self.example_inputs)
        backward = backward_compiler(self.partition.backward,
                                     _placeholder_examples(self.partition.backward))
        self.training = training_callable(plan, forward, backward)
        return self.training

    def _release_examples(self) -> None:
        # Both paths exist: the example tensors are no longer needed for tracing.
        if self.training is not None and self.inference is not None:
            self.example_inputs = None

    def __call__(self, *args):
        if torch.is_grad_enabled() and self.grad_inputs:
            if self.training is None:
                self.compile_training()
                self._release_examples()
            return self.training(*args)
        if self.inference is None:
            self.compile_inference()
            self._release_examples()
        return self.inference(*args)


def aot_compile(gm: fx.GraphModule, example_inputs: list, *, fw_compiler: Compiler,
                bw_compiler: Compiler | None = None, inference_compiler: Compiler | None = None,
                decompositions: dict | None = None, partitioner: str = "min_cut") -> Callable:
    """Compile a captured graph's forward and backward separately through the given compilers.

    Returns a callable taking the same positional inputs as `gm` and returning what
    `gm` returns; gradients flow to inputs that require grad. Graphs this stage
    cannot handle are run eagerly (logged), never answered wrongly.
    """
    if partitioner not in ("min_cut", "save_all"):
        raise ValueError(f"unknown partitioner {partitioner!r}; use 'min_cut' or 'save_all'")
    compilers = (fw_compiler, bw_compiler or fw_compiler, inference_compiler or fw_compiler)
    try:
        compiled = _Compiled(gm, example_inputs, compilers, decompositions, partitioner)
        if torch.is_grad_enabled() and compiled.grad_inputs:
            compiled.compile_training()
        else:
            compiled.compile_inference()
    except AutogradUnsupported as error:
        log.info("tensorjit.autograd: running graph eagerly: %s", error)
        return gm
    except Exception as error:  # noqa: BLE001 - any tracing failure falls back, never a wrong answer
        log.warning("tensorjit.autograd: tracing failed, running graph eagerly: %r", error)
        return gm
    return compiled
