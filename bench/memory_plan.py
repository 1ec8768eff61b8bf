"""The memory plan of GPU workloads, measured on a CPU: planned peak of live temporaries and
the wrapper's allocations and views per graph, with the Triton emitter's lowering.

    PYTHONPATH=src:/work/scratch/tv python bench/memory_plan.py resnet50_infer gpt2_train densenet121_train tiny_block

Each graph is lowered as on a GPU (TritonEmitter, convolutions channels-last) and its wrapper
generated with a launch hook that launches nothing; the compiled function returns empty
tensors of the traced outputs' layouts, so nothing heavy runs on the CPU (training's backward
graph is compiled too). Per graph: `memory.planned_peak_bytes` (the most bytes of
temporaries and ATen results alive at once under the plan: inputs, parameters and workspaces
not counted), the wrapper's `empty`/`empty_strided` lines (allocations of kernel outputs; not
the copies under a layout check, which run only when an ATen result's layout differs), its
`.as_strided(` lines (views for ATen calls), in-place pairs and handed-over tensors.
"""

from __future__ import annotations

import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))

import tensorjit  # noqa: E402
import tensorjit.codegen.cpp.compile as cpp_compile  # noqa: E402
from tensorjit.codegen import ir, memory, pipeline  # noqa: E402
from tensorjit.codegen.triton import compile as triton_compile  # noqa: E402
from tensorjit.codegen.triton.layout import prefer_channels_last  # noqa: E402
from tensorjit.codegen.wrapper import build_runner  # noqa: E402

ROWS: list[dict] = []
# Lines of the wrapper's body (not the copies under a layout check, indented further)
ALLOCATION = re.compile(r"^    \w+ = empty(?:_strided)?\(", re.MULTILINE)
VIEW = re.compile(r"^    \w+ = \w+\.as_strided\(", re.MULTILINE)


class NoLaunch:
    """A launch hook whose kernels do nothing (the wrapper's text is what is measured)."""

    device_test = "is_cpu"
    device = None
    writes_in_place = getattr(triton_compile.TritonLaunch, "writes_in_place", False)

    def statement(self, source, step, written):
        return "pass"


def _empties(gm):
    """A function returning empty tensors shaped as the graph's outputs (its `val` metadata)."""
    [output] = [node for node in gm.graph.nodes if node.op == "output"]

    def make(value):
        if isinstance(value, torch.fx.Node):
            value = value.meta.get("val")
        if isinstance(value, torch.Tensor):
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype)
        if isinstance(value, (list, tuple)):
            return type(value)(make(v) for v in value)
        return value

    return lambda *args: make(output.args[0])


def lower(gm, example_inputs, config, emitter):
    emitter = triton_compile.TritonEmitter(torch.device("cpu"), config)
    programs = []
    emitter.build = lambda name, program, config: programs.append(program)
    pipeline.compile_graph(gm, example_inputs, config, emitter)
    [program] = programs
    runner = build_runner(program, NoLaunch(), {}, None)
    text = runner.wrapper_source
    ROWS.append({
        "graph": f"{type(gm).__name__}#{len(ROWS)}",
        "steps": len(program.steps),
        "peak_MB": memory.planned_peak_bytes(program, in_place=NoLaunch.writes_in_place) / 2**20,
        "empty": len(ALLOCATION.findall(text)),
        "as_strided": len(VIEW.findall(text)),
        "handed_over": len(memory.reuses(program, in_place=NoLaunch.writes_in_place)),
        "in_place": len(memory.in_place_pairs(program)) if NoLaunch.writes_in_place else 0,
    })
    if os.environ.get("MEMORY_PLAN_WRAPPERS"):
        with open(f"{os.environ['MEMORY_PLAN_WRAPPERS']}.{len(ROWS)}.py", "w") as handle:
            handle.write(text)
    return _empties(gm)


def run(name: str) -> None:
    from gpu_models import GPT2, GPT2Settings, TinyBlock

    torch.manual_seed(0)
    if name == "resnet50_infer":
        import torchvision

        model, inputs, train = torchvision.models.resnet50().half().eval(), [torch.randn(64, 3, 224, 224).half()], False
    elif name == "gpt2_train":
        model, inputs, train = GPT2(GPT2Settings()).to(torch.bfloat16).train(), \
            [torch.randint(0, 50257, (8, 256))], True
    elif name == "densenet121_train":
        import torchvision

        model, inputs, train = torchvision.models.densenet121().train(), [torch.randn(16, 3, 128, 128)], True
    elif name == "tiny_block":
        model, inputs, train = TinyBlock().half().eval(), [torch.randn(32, 128, 768).half()], False
    else:
        raise KeyError(name)
    compiled = tensorjit.compile(model)
    if train:
        compiled(*inputs).float().mean().backward()
    else:
        with torch.inference_mode():
            compiled(*inputs)


def main(argv: list[str]) -> None:
    cpp_compile.compile_graph = lower
    # convolutions channels-last as on a GPU
    triton_compile.prefer_channels_last = lambda gm, inputs: prefer_channels_last(gm, inputs, require_cuda=False)
    for name in argv:
        ROWS.clear()
        tensorjit.reset()
        run(name)
        print(f"== {name}")
        for row in ROWS:
            print("  " + "  ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
        print(f"  total: empty {sum(r['empty'] for r in ROWS)}  as_strided {sum(r['as_strided'] for r in ROWS)}")


if __name__ == "__main__":
    main(sys.argv[1:])
