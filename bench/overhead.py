"""Per-call overhead of a compiled call (guards plus dispatch), backend="eager".

Takes: command-line options (--rounds, --number, --json). Returns: prints, for
(a) a function of four 4-element tensors (a + b * c - d) and (b) a small
4-layer MLP module, the median microseconds per call of eager, torch.compile
(backend="eager") and tensorjit.compile (backend="eager"), the overhead of each
compiler (compiled - eager) and the ratio tensorjit_overhead / torch_overhead
(the goal is <= 1/3). With --json, also writes the figures as JSON.

With backend="eager" the compiled graph runs the same ATen ops as eager code, so
the difference is the cost of entering the compiled frame: checking guards,
looking up the cache entry, calling the graph, and unpacking its outputs.

With --models (torchvision's densenet121 and resnet50, random weights, eval, one
1x3x32x32 image, every call under torch.no_grad(); and densenet121's layers at
growth rate 4, whose kernels are cheap): the same for models with hundreds of
parameters and buffers, each a graph input that guards check every call, plus
tensorjit's default backend ("tensorjit.compile default", its overhead taken
over its own compiled graph called alone), plus "host" variants of both
compilers whose backend replays the graph's first outputs, so that a call
costs its host work alone. The kernels of the full-width models cost
milliseconds on a CPU: compare their "host" rows; on the thin model "overhead
vs graph" is meaningful too.

Runs against the reference alone when tensorjit.compile is missing or fails.
Variants are timed in interleaved rounds so slow drift hits them equally.

    PYTHONPATH=src python bench/overhead.py [--rounds 30] [--number 2000]
    PYTHONPATH=src python bench/overhead.py --models --rounds 15 --number 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import torch


def four_tensor_function(a, b, c, d):
    return a + b * c - d


class MLP(torch.nn.Module):
    """Four small linear layers with ReLU between them."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(width, width) for _ in range(4)])

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        return self.layers[-1](x)


def make_cases() -> dict[str, tuple[Callable, tuple]]:
    torch.manual_seed(0)
    tensors = tuple(torch.randn(4) for _ in range(4))
    return {
        "a+b*c-d (4 x 4-element tensors)": (four_tensor_function, tensors),
        "4-layer MLP (16 wide, batch 2)": (MLP().eval(), (torch.randn(2, 16),)),
    }


def make_model_cases() -> dict[str, tuple[Callable, tuple]]:
    """Models with many parameters (torchvision's, random weights) at a tiny input; empty without torchvision."""
    try:
        import torchvision
    except Exception as error:  # torchvision is optional: the CPU machine may lack it
        print(f"--models: torchvision unavailable ({error!r}); no model cases", file=sys.stderr)
        return {}
    torch.manual_seed(0)
    image = torch.randn(1, 3, 32, 32)
    cases = {}
    for name in ("densenet121", "resnet50"):
        model = getattr(torchvision.models, name)().eval()
        count = len(list(model.parameters())) + len(list(model.buffers()))
        cases[f"{name} eval, 1x3x32x32, no_grad ({count} parameters and buffers)"] = (model, (image,))
    # densenet121's layers and parameter count at a width whose kernels cost microseconds:
    # the overhead over the graph alone is then not lost in the kernels' noise.
    thin = torchvision.models.DenseNet(growth_rate=4, block_config=(6, 12, 24, 16), num_init_features=8,
                                       bn_size=1).eval()
    count = len(list(thin.parameters())) + len(list(thin.buffers()))
    cases[f"densenet121 thin (growth 4), 1x3x32x32, no_grad ({count} parameters and buffers)"] = (thin, (image,))
    return cases


class RecordingEager:
    """backend="eager" (or the backend given) that also keeps the graph and inputs, to time the graph alone."""

    def __init__(self, backend: Callable | None = None, into: "RecordingEager | None" = None):
        self.graphs = [] if into is None else into.graphs
        self.backend = backend

    def __call__(self, gm, example_inputs):
        compiled = gm.forward if self.backend is None else self.backend(gm, example_inputs)
        self.graphs.append((compiled, list(example_inputs)))
        return compiled


def replay_backend(gm, example_inputs):
    """A backend whose graph runs once, then returns those outputs again: a compiled call
    then costs its host work alone (guards, reading inputs, the call, rebuilding outputs)."""
    outputs = []

    def replay(*inputs):
        if not outputs:
            outputs.append(gm.forward(*inputs))
        return outputs[0]
    return replay


def compilers(default_backend: bool = False) -> dict[str, Callable | str]:
    """Each compiler as (fn, backend) -> compiled fn, or a string saying why it is unavailable.

    default_backend: also tensorjit with its default backend ("tensorjit.compile default"),
    recorded through the same RecordingEager (which then wraps that backend)."""
    found: dict[str, Any] = {"torch.compile": lambda fn, backend: torch.compile(fn, backend=backend)}
    try:
        import tensorjit

        if hasattr(tensorjit, "compile"):
            found["tensorjit.compile"] = lambda fn, backend: tensorjit.compile(fn, backend=backend)
            if default_backend:
                from tensorjit.backends.registry import lookup_backend
                default = lookup_backend("inductor")
                found["tensorjit.compile default"] = lambda fn, recorder: tensorjit.compile(
                    fn, backend=RecordingEager(default, into=recorder))
                found["torch.compile host"] = lambda fn, recorder: torch.compile(fn, backend=replay_backend)
                found["tensorjit.compile host"] = lambda fn, recorder: tensorjit.compile(fn, backend=replay_backend)
        else:
            found["tensorjit.compile"] = "tensorjit.compile does not exist yet"
    except Exception as error:  # the benchmark must still run against the reference
        found["tensorjit.compile"] = f"import failed: {error!r}"
    return found


def per_call_microseconds(fn: Callable, args: tuple, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn(*args)
    return (time.perf_counter() - start) * 1e6 / number


def prepare(case_fn: Callable, args: tuple, default_backend: bool = False) -> dict[str, Callable | str]:
    """Eager plus every available compiled variant, warmed up and checked against eager.

    Each compiled variant runs under backend="eager" ("name"); its captured graph,
    when there is exactly one and its example inputs are real tensors, is also
    timed alone ("name graph"), called directly with those inputs.
    """
    expected = case_fn(*args)
    variants: dict[str, Callable | str] = {"eager": case_fn}
    for name, make in compilers(default_backend).items():
        if isinstance(make, str):
            variants[name] = make
            continue
        try:
            recorder = RecordingEager()
            compiled = make(case_fn, recorder)
            for _ in range(20 if not default_backend else 3):
                actual = compiled(*args)
            torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
            variants[name] = compiled
        except Exception as error:
            variants[name] = f"failed: {type(error).__name__}: {error}"
            continue
        graph = graph_alone(recorder)
        if graph is not None:
            variants[f"{name} graph"] = graph
    return variants


def graph_alone(recorder: RecordingEager) -> Callable | None:
    if len(recorder.graphs) != 1:
        return None
    graph, inputs = recorder.graphs[0]
    if not all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in inputs):
        return None  # fake or symbolic inputs cannot be run
    return lambda *ignored: graph(*inputs)


def measure(variants: dict[str, Callable | str], args: tuple, rounds: int, number: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {name: [] for name, fn in variants.items() if callable(fn)}
    for _ in range(rounds):
        for name in samples:
            samples[name].append(per_call_microseconds(variants[name], args, number))
    results: dict[str, Any] = {name: statistics.median(values) for name, values in samples.items()}
    results.update({name: reason for name, reason in variants.items() if not callable(reason)})
    return results


COMPILED = ("torch.compile", "tensorjit.compile", "tensorjit.compile default", "torch.compile host",
            "tensorjit.compile host")


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Overheads: compiled - eager (as asked), and compiled - its own graph run alone."""
    eager = results["eager"]
    summary = {"eager_us": eager}
    for name in COMPILED:
        if name not in results:
            continue
        value = results.get(name)
        summary[f"{name}_us"] = value
        if isinstance(value, float):
            summary[f"{name}_overhead_us"] = value - eager
            graph = results.get(f"{name} graph")
            if isinstance(graph, float):
                summary[f"{name}_graph_us"] = graph
                summary[f"{name}_overhead_vs_graph_us"] = value - graph
    for suffix, key in (("overhead_us", "ratio"), ("overhead_vs_graph_us", "ratio_vs_graph")):
        theirs = summary.get(f"torch.compile_{suffix}")
        ours = summary.get(f"tensorjit.compile_{suffix}")
        if isinstance(theirs, float) and isinstance(ours, float) and theirs > 0:
            summary[key] = ours / theirs
        if suffix == "overhead_us" and isinstance(summary.get("torch.compile host_us"), float):
            summary["ratio_host"] = summary["tensorjit.compile host_us"] / summary["torch.compile host_us"]
        default = summary.get(f"tensorjit.compile default_{suffix}")
        if isinstance(theirs, float) and isinstance(default, float) and theirs > 0:
            summary[f"default_{key}"] = default / theirs
    return summary


def environment() -> dict[str, str]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        commit = "unknown"
    return {
        "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cpus".strip(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "commit": commit or "unknown",
        "threads": str(torch.get_num_threads()),
    }


def print_report(env: dict[str, str], table: dict[str, dict[str, Any]]) -> None:
    print("per-call overhead, backend='eager' | " + ", ".join(f"{k}={v}" for k, v in env.items()))
    for case, summary in table.items():
        print(f"\n{case}")
        print(f"  {'eager':<26}{summary['eager_us']:10.2f} us")
        for name in COMPILED:
            if f"{name}_us" not in summary:
                continue
            value = summary[f"{name}_us"]
            if not isinstance(value, float):
                print(f"  {name:<26}  n/a ({value})")
                continue
            line = f"  {name:<26}{value:10.2f} us   overhead vs eager {summary[f'{name}_overhead_us']:8.2f} us"
            if f"{name}_graph_us" in summary:
                line += (f"   graph alone {summary[f'{name}_graph_us']:8.2f} us"
                         f"   overhead vs graph {summary[f'{name}_overhead_vs_graph_us']:8.2f} us")
            print(line)
        for key, label in (("ratio", "vs eager"), ("ratio_vs_graph", "vs graph")):
            if key in summary:
                goal = summary.get("goal", 1 / 3)
                verdict = "meets" if summary[key] <= goal else "misses"
                print(f"  ratio tensorjit/torch overhead ({label}): {summary[key]:.3f} "
                      f"({verdict} the goal <= {goal:.3f})")
            if key == "ratio" and "ratio_host" in summary:
                print(f"  ratio tensorjit/torch host cost alone (graph replaying its outputs): "
                      f"{summary['ratio_host']:.3f}")
            if f"default_{key}" in summary:
                print(f"  ratio tensorjit default backend/torch overhead ({label}): {summary[f'default_{key}']:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per variant (median taken)")
    parser.add_argument("--number", type=int, default=1000, help="calls per round")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 = steadier)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--models", action="store_true",
                        help="torchvision's densenet121 and resnet50 (many parameters) instead of the small cases")
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    table = {}
    cases = make_model_cases() if options.models else make_cases()
    for case, (fn, args) in cases.items():
        with torch.no_grad() if options.models else contextlib.nullcontext():
            variants = prepare(fn, args, default_backend=options.models)
            table[case] = summarize(measure(variants, args, options.rounds, options.number))
            # Goals: a third of torch.compile's overhead on the small cases; at most torch's on the models.
            table[case]["goal"] = 1.0 if options.models else 1 / 3
    env = environment()
    print_report(env, table)
    if options.json:
        with open(options.json, "w") as handle:
            json.dump({"environment": env, "cases": table}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
