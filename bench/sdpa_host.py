import time, torch
import torch.nn.functional as F
q = torch.randn(8, 12, 512, 64, device="cuda", dtype=torch.bfloat16)
ops = {"cudnn": lambda: torch.ops.aten._scaled_dot_product_cudnn_attention(q, q, q, None, False, 0.0, True, False),
       "flash": lambda: torch.ops.aten._scaled_dot_product_flash_attention(q, q, q, 0.0, True),
       "efficient": lambda: torch.ops.aten._scaled_dot_product_efficient_attention(q, q, q, None, False, 0.0, True),
       "F.sdpa": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)}
for name, op in ops.items():
    for _ in range(5): op()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(100): op()
    host = (time.perf_counter() - t) * 1e4
    torch.cuda.synchronize(); d = (time.perf_counter() - t) * 1e4
    print(f"sdpa {name}: host {host:.1f} us/call, with device {d:.1f} us/call")
