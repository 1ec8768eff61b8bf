"""Host work per compiled call on a small Llama (issue 12, item 4): time and ATen calls.

    python bench/llama_host.py eager|tensorjit|torch_compile

A 2-layer LlamaForCausalLM (hidden 64, 4 heads, 2 KV heads, vocab 512), 1x32 tokens,
inference, one thread. Prints the median ms of 200 calls and the ATen calls per call
counted by torch.profiler. torch.compile is called here only as the reference.
"""

from __future__ import annotations

import collections
import sys
import time

import torch


def build():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=512, max_position_embeddings=128,
                         attn_implementation="eager")
    model = LlamaForCausalLM(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            return self.inner(input_ids=ids, use_cache=False).logits

    return Logits(model), torch.randint(0, 512, (1, 32))


def main(system: str) -> None:
    torch.set_num_threads(1)
    model, ids = build()
    if system == "tensorjit":
        import tensorjit
        function = tensorjit.compile(model)
    elif system == "torch_compile":
        function = torch.compile(model)
    else:
        function = model
    with torch.no_grad():
        torch.testing.assert_close(function(ids), model(ids), rtol=1e-4, atol=1e-4)
        for _ in range(20):
            function(ids)
        times = []
        for _ in range(200):
            start = time.perf_counter()
            function(ids)
            times.append(time.perf_counter() - start)
        with torch.profiler.profile() as profile:
            for _ in range(10):
                function(ids)
    calls = collections.Counter(e.name for e in profile.events() if e.name.startswith("aten::"))
    print(f"{system}: median {sorted(times)[len(times) // 2] * 1e3:.3f} ms per call")
    print(f"ATen calls per call: {sum(calls.values()) / 10:g} in all;",
          ", ".join(f"{name} {count / 10:g}" for name, count in calls.most_common()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tensorjit")
