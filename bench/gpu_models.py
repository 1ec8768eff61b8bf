"""Models the GPU benchmark runs: TinyBlock and a small GPT-2 written out by hand.

GPT-2 is written here (not taken from transformers) so that it traces with
torch.fx.symbolic_trace and so that weights are random and the benchmark needs
no network. Shapes follow GPT-2 small: 12 layers, 12 heads, width 768.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyBlock(nn.Module):
    """LayerNorm -> Linear(768, 3072) -> gelu -> x * 1.41421356 + 0.01 -> Linear(3072, 768) -> + residual."""

    def __init__(self, width: int = 768, hidden: int = 3072):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x):
        hidden = F.gelu(self.up(self.norm(x)))
        hidden = hidden * 1.41421356 + 0.01
        return self.down(hidden) + x


@dataclasses.dataclass(frozen=True)
class GPT2Settings:
    vocab_size: int = 50257
    context: int = 1024
    layers: int = 12
    heads: int = 12
    width: int = 768


class Attention(nn.Module):
    def __init__(self, settings: GPT2Settings):
        super().__init__()
        self.heads = settings.heads
        self.qkv = nn.Linear(settings.width, 3 * settings.width)
        self.projection = nn.Linear(settings.width, settings.width)

    def forward(self, x):
        batch, length, width = x.shape
        head_width = width // self.heads
        qkv = self.qkv(x).view(batch, length, 3, self.heads, head_width)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attended = F.scaled_dot_product_attention(query, key, value, is_causal=True)
        return self.projection(attended.transpose(1, 2).reshape(batch, length, width))


class MLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, settings: GPT2Settings):
        super().__init__()
        self.norm_attention = nn.LayerNorm(settings.width)
        self.attention = Attention(settings)
        self.norm_mlp = nn.LayerNorm(settings.width)
        self.mlp = MLP(settings.width)

    def forward(self, x):
        x = x + self.attention(self.norm_attention(x))
        return x + self.mlp(self.norm_mlp(x))


class GPT2(nn.Module):
    def __init__(self, settings: GPT2Settings):
        super().__init__()
        self.settings = settings
        self.token_embedding = nn.Embedding(settings.vocab_size, settings.width)
        self.position_embedding = nn.Embedding(settings.context, settings.width)
        self.blocks = nn.ModuleList(Block(settings) for _ in range(settings.layers))
        self.norm = nn.LayerNorm(settings.width)
        self.head = nn.Linear(settings.width, settings.vocab_size, bias=False)
        self.head.weight = self.token_embedding.weight
        for parameter in self.parameters():
            if parameter.dim() >= 2:
                nn.init.normal_(parameter, std=0.02)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))
