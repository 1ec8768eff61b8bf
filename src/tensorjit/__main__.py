"""`python -m tensorjit demo`: compile a model, check it against eager, print what happened and the speedup."""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch import nn


class TinyBlock(nn.Module):
    """The benchmark block of the seed documents: LayerNorm -> MLP with GELU -> residual."""

    def __init__(self, hidden: int, expansion: int = 4) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, hidden * expansion)
        self.fc2 = nn.Linear(hidden * expansion, hidden)

    def forward(self, x):
        residual = x
        x = self.ln(x)
        x = self.fc1(x)
        x = torch.nn.functional.gelu(x)
        x = x * 1.41421356 + 0.01
        x = self.fc2(x)
        return x + residual


class MLP(nn.Module):
    def __init__(self, width: int = 256, depth: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1)).softmax(-1)


def _models(device, dtype):
    cpu = device.type == "cpu"
    return {
        "tinyblock": (lambda: TinyBlock(256 if cpu else 768), (4, 32, 256) if cpu else (32, 128, 768)),
        "mlp": (lambda: MLP(), (64, 256)),
        "cnn": (lambda: SmallCNN(), (8, 3, 32, 32)),
    }


def _time(fn, x, device, iters: int, repeats: int) -> list[float]:
    """Milliseconds per call, one figure per repeat of `iters` calls (after a warm-up)."""
    figures = []
    with torch.inference_mode():
        for _ in range(3):
            fn(x)
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                fn(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            figures.append((time.perf_counter() - start) * 1000 / iters)
    return figures


def _summary(figures: list[float]) -> str:
    ordered = sorted(figures)
    return (f"{statistics.median(ordered):.3f} ms / iter "
            f"(median of {len(ordered)}, spread {ordered[0]:.3f}-{ordered[-1]:.3f})")


def _parser() -> argparse.ArgumentParser:
    import tensorjit
    from .config import MODES

    parser = argparse.ArgumentParser(
        prog="python -m tensorjit demo",
        description="Compile a small model with tensorjit, check it against eager PyTorch, "
                    "print the graphs, graph breaks and the measured speedup.")
    parser.add_argument("--model", default="tinyblock", choices=["tinyblock", "mlp", "cnn"],
                        help="tinyblock: LayerNorm+MLP+GELU block; mlp: 4 Linear+ReLU; cnn: conv+batch-norm net")
    parser.add_argument("--backend", default="inductor", choices=tensorjit.list_backends(),
                        help="the compiler backend (default: inductor, tensorjit's code generators)")
    parser.add_argument("--mode", default=None, choices=sorted(MODES),
                        help="a named option set, as torch.compile's mode")
    parser.add_argument("--iters", type=int, default=50, help="calls per timed repeat")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats; the median is reported")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu or cuda (default: cuda when available)")
    return parser


def demo(argv: list[str]) -> int:
    import tensorjit
    args = _parser().parse_args(argv)
    device = torch.device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    make, shape = _models(device, dtype)[args.model]
    model = make().to(device=device, dtype=dtype).eval()
    x = torch.randn(*shape, device=device, dtype=dtype)
    if args.mode in ("reduce-overhead", "max-autotune") and device.type == "cpu":
        print(f"note: mode={args.mode} records CUDA graphs, which do nothing on the CPU")

    graphs = []
    backend = tensorjit.backends.registry.lookup_backend(args.backend)

    def counting(gm, example_inputs):
        graphs.append(gm)
        return backend(gm, example_inputs)

    compiled = tensorjit.compile(model, backend=counting, mode=args.mode)
    start = time.perf_counter()
    with torch.inference_mode():
        out = compiled(x)
    compile_s = time.perf_counter() - start
    with torch.inference_mode():
        expected = model(x)
    tol = 1e-2 if dtype == torch.float16 else 1e-4
    torch.testing.assert_close(out, expected, rtol=tol, atol=tol)
    explanation = tensorjit.explain(model)(x)
    print(f"model={args.model} shape={tuple(shape)} device={device} dtype={dtype} backend={args.backend}")
    print(f"graphs={len(graphs)} graph_breaks={explanation.graph_break_count} ops={explanation.op_count}")
    for reason in explanation.break_reasons:
        print(f"  break: {reason}")
    if not graphs:
        print("nothing was captured: the model ran eagerly, so there is no speedup to report")
        return 1
    print(f"matches eager: yes (rtol=atol={tol})")
    print(f"first call (capture + compile): {compile_s:.3f} s")
    eager_ms = _time(model, x, device, args.iters, args.repeats)
    compiled_ms = _time(compiled, x, device, args.iters, args.repeats)
    print(f"eager    : {_summary(eager_ms)}")
    print(f"compiled : {_summary(compiled_ms)}")
    print(f"speedup  : {statistics.median(eager_ms) / statistics.median(compiled_ms):.2f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    import tensorjit

    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m tensorjit",
                                     description="tensorjit: a just-in-time compiler for PyTorch programs.")
    parser.add_argument("--version", action="version", version=f"tensorjit {tensorjit.__version__}")
    parser.add_argument("command", choices=["demo"], help="demo: compile a model and compare it with eager "
                        "(`python -m tensorjit demo --help` for its options)")
    parser.parse_args(argv[:1])
    return demo(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
