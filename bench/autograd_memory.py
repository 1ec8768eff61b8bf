"""Saved-activation memory of one training step: eager vs tensorjit (min-cut, save-all) vs torch.compile.

Run: PYTHONPATH=src python bench/autograd_memory.py [--device cuda]
Saved bytes are counted with torch.autograd.graph.saved_tensors_hooks over unique
storages (parameters included, the same for every column); on CUDA the peak
memory allocated during the forward above the starting point is printed too.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "autograd"))
from autograd_helpers import lift_make_fx  # noqa: E402

from tensorjit.autograd import aot_compile  # noqa: E402
from tensorjit.backends.aot_eager import run_graph_eagerly  # noqa: E402


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.GELU(),
            torch.nn.MaxPool2d(2), torch.nn.Dropout(0.1), torch.nn.Flatten(),
            torch.nn.Linear(32 * 16 * 16, 10))

    def forward(self, x):
        return self.body(x)


def models(device):
    torch.manual_seed(0)
    transformer = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, dropout=0.1,
                                         batch_first=True), num_layers=2, enable_nested_tensor=False)
    yield "transformer", transformer.to(device), torch.randn(8, 64, 128, device=device)
    yield "cnn", ConvNet().to(device), torch.randn(16, 3, 32, 32, device=device)


def measure(forward, device) -> tuple[int, int | None]:
    """(saved bytes over unique storages, CUDA forward peak above start or None)."""
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    peak = None
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = forward().float().pow(2).mean()
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - start
    loss.backward()
    return sum(storages.values()), peak


def tensorjit_forward(model, x, partitioner):
    gm, state = lift_make_fx(model, x)
    compiled = aot_compile(gm, [*state, x], fw_compiler=run_graph_eagerly, partitioner=partitioner)
    return lambda: compiled(*state, x)[0]


def rows(device):
    for name, model, x in models(device):
        variants = {
            "eager": (lambda m=copy.deepcopy(model): m(x)),
            "tensorjit min_cut": tensorjit_forward(copy.deepcopy(model), x, "min_cut"),
            "tensorjit save_all": tensorjit_forward(copy.deepcopy(model), x, "save_all"),
        }
        reference = torch.compile(copy.deepcopy(model), backend="aot_eager")
        variants["torch.compile aot_eager"] = lambda m=reference: m(x)
        for label, forward in variants.items():
            measure(forward, device)  # warm up (compiles)
            saved, peak = measure(forward, device)
            yield name, label, saved, peak


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    device = parser.parse_args().device
    print(f"device={device} torch={torch.__version__}")
    print(f"| model | variant | saved activations (MiB) | forward peak (MiB) |")
    print(f"|---|---|---|---|")
    for name, label, saved, peak in rows(device):
        peak_text = f"{peak / 2**20:.2f}" if peak is not None else "n/a"
        print(f"| {name} | {label} | {saved / 2**20:.2f} | {peak_text} |")


if __name__ == "__main__":
    main()
