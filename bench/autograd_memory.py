"""Saved activations of one training step: eager vs tensorjit (min-cut, save-all) vs torch.compile(aot_eager).

    PYTHONPATH=src python bench/autograd_memory.py [--device cuda]

Counts the bytes autograd keeps for the backward pass, through
`torch.autograd.graph.saved_tensors_hooks`: every tensor saved during the forward,
deduplicated by storage, excluding parameters and inputs (alive anyway). That is the
memory a partitioner decides about; it is what "saves one tensor, not two" means at
model scale.
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch._dynamo

import tensorjit
from tensorjit.config import config as tj_config


def small_transformer():
    layer = torch.nn.TransformerEncoderLayer(128, 4, 512, dropout=0.1, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), lambda d: torch.randn(8, 64, 128, device=d)


def small_cnn():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.GELU(),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Dropout(0.1), torch.nn.Linear(1024, 10))
    return model, lambda d: torch.randn(16, 3, 32, 32, device=d)


def saved_bytes(fn, model, x) -> int:
    excluded = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    seen: dict[int, int] = {}

    def pack(t):
        if isinstance(t, torch.Tensor):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in excluded:
                seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(x).float().square().mean()
    loss.backward()
    return sum(seen.values())


def measure(make, device: str) -> dict[str, int]:
    torch.manual_seed(0)
    model, data = make()
    model = model.to(device).train()
    x = data(device)
    results = {"eager": saved_bytes(model, model, x)}
    for partitioner in ("min_cut", "save_all"):
        tj_config.partitioner = partitioner
        tensorjit.reset()
        compiled = tensorjit.compile(copy.deepcopy(model), backend="aot_eager")
        compiled(x)  # capture and compile outside the measurement
        results[f"tensorjit {partitioner}"] = saved_bytes(compiled, compiled._orig_mod, x)
    tj_config.partitioner = "min_cut"
    torch._dynamo.reset()
    reference = torch.compile(copy.deepcopy(model), backend="aot_eager")
    reference(x)
    results["torch.compile aot_eager"] = saved_bytes(reference, reference._orig_mod, x)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    print(f"saved activation bytes of one training step, device={args.device}, torch={torch.__version__}")
    for name, make in (("transformer (2 layers, 8x64x128)", small_transformer), ("cnn (16x3x32x32)", small_cnn)):
        row = measure(make, args.device)
        base = row["eager"]
        print(f"\n{name}")
        for key, value in row.items():
            print(f"  {key:26s} {value / 2**20:8.2f} MiB  ({value / base:5.2f} of eager)")


if __name__ == "__main__":
    main()
