"""CPU benchmark: eager vs torch.compile vs tensorjit's inductor backend (driven directly on
symbolic_trace graphs). Prints a markdown table of median milliseconds and cold-compile seconds.

Usage: PYTHONPATH=src python bench/cpu_kernels.py [--runs N] [--no-torch-compile]
"""

import argparse
import statistics
import time

import torch

from tensorjit.backends.inductor import inductor


class Chain(torch.nn.Module):
    def forward(self, x):
        for k in range(10):
            x = torch.sigmoid(x * 1.01 + 0.1 * k) - 0.5
        return x


class Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1)


class LayerNormGelu(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        return torch.nn.functional.gelu(self.norm(x))


class TinyBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(256)
        self.up = torch.nn.Linear(256, 1024)
        self.down = torch.nn.Linear(1024, 256)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(self.norm(x))) * 1.41421356 + 0.01) + x


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(32)
        self.conv = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(32)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.stem(x)))
        x = torch.relu(self.bn2(self.conv(x)) + x)
        return self.head(x.mean((2, 3)))


def median_ms(fn, inputs, runs):
    for _ in range(3):
        fn(*inputs)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--no-torch-compile", action="store_true")
    options = parser.parse_args()
    cases = [
        ("pointwise chain 1024x1024", Chain(), [torch.randn(1024, 1024)]),
        ("softmax 1024x4096", Softmax(), [torch.randn(1024, 4096)]),
        ("layer norm + gelu 1024x4096", LayerNormGelu(4096), [torch.randn(1024, 4096)]),
        ("TinyBlock 4x32x256", TinyBlock(), [torch.randn(4, 32, 256)]),
        ("small CNN 2x3x64x64", SmallCNN(), [torch.randn(2, 3, 64, 64)]),
    ]
    print("| case | eager ms | torch.compile ms (cold s) | tensorjit ms (cold s) |")
    print("|---|---|---|---|")
    with torch.no_grad():
        for name, model, inputs in cases:
            model.eval()
            eager = median_ms(model, inputs, options.runs)
            reference = "-"
            if not options.no_torch_compile:
                start = time.perf_counter()
                compiled = torch.compile(model)
                compiled(*inputs)
                cold = time.perf_counter() - start
                reference = f"{median_ms(compiled, inputs, options.runs):.2f} ({cold:.1f})"
            start = time.perf_counter()
            ours = inductor(torch.fx.symbolic_trace(model), inputs)
            ours(*inputs)
            cold = time.perf_counter() - start
            mine = f"{median_ms(ours, inputs, options.runs):.2f} ({cold:.2f})"
            print(f"| {name} | {eager:.2f} | {reference} | {mine} |", flush=True)


if __name__ == "__main__":
    main()
