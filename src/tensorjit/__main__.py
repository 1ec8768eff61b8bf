"""`python -m tensorjit demo`: compile a model, check it against eager, print what happened and the speedup."""

from __future__ import annotations

import argparse
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


def _time(fn, x, device, iters: int) -> float:
    with torch.inference_mode():
        for _ in range(3):
            fn(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            fn(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1000 / iters


def demo(argv: list[str]) -> int:
    import tensorjit
    parser = argparse.ArgumentParser(prog="python -m tensorjit demo")
    parser.add_argument("--model", default="tinyblock", choices=["tinyblock", "mlp", "cnn"])
    parser.add_argument("--backend", default="inductor", help=f"one of {tensorjit.list_backends()}")
    parser.add_argument("--mode", default=None)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    make, shape = _models(device, dtype)[args.model]
    model = make().to(device=device, dtype=dtype).eval()
    x = torch.randn(*shape, device=device, dtype=dtype)

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
    eager_ms = _time(model, x, device, args.iters)
    compiled_ms = _time(compiled, x, device, args.iters)
    print(f"model={args.model} shape={tuple(shape)} device={device} dtype={dtype} backend={args.backend}")
    print(f"graphs={len(graphs)} graph_breaks={explanation.graph_break_count} ops={explanation.op_count}")
    for reason in explanation.break_reasons:
        print(f"  break: {reason}")
    print(f"matches eager: yes (rtol=atol={tol})")
    print(f"first call (capture + compile): {compile_s:.3f} s")
    print(f"eager    : {eager_ms:.3f} ms / iter")
    print(f"compiled : {compiled_ms:.3f} ms / iter")
    print(f"speedup  : {eager_ms / compiled_ms:.2f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("demo",):
        print("usage: python -m tensorjit demo [--model tinyblock|mlp|cnn] [--backend NAME] [--mode MODE]")
        return 2
    return demo(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
