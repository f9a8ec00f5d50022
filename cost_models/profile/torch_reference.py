"""A reference decoder-only transformer in PyTorch, written from the model definition (not from
meshplan's formulas): the layers `meshplan profile layers` times and the oracle the tests compare the
analytical parameter and FLOP counts with. Importing this module needs torch ([profile] extra)."""

from __future__ import annotations

import torch
from torch import nn

from meshcore import ModelSpec, Norm


class Block(nn.Module):
    """A reference pre-norm decoder layer written from the model definition, not from meshplan's formulas."""

    def __init__(self, m: ModelSpec) -> None:
        super().__init__()
        h, f = m.hidden_size, m.ffn_hidden_size
        norm = nn.LayerNorm if m.norm is Norm.LAYERNORM else nn.RMSNorm
        self.m = m
        self.norm1, self.norm2 = norm(h), norm(h)
        self.q = nn.Linear(h, m.q_dim, bias=m.qkv_bias or m.linear_bias)
        self.k = nn.Linear(h, m.kv_dim, bias=m.qkv_bias or m.linear_bias)
        self.v = nn.Linear(h, m.kv_dim, bias=m.qkv_bias or m.linear_bias)
        self.o = nn.Linear(m.q_dim, h, bias=m.linear_bias)
        self.up = nn.Linear(h, f, bias=m.linear_bias)
        self.gate = nn.Linear(h, f, bias=m.linear_bias) if m.gated_mlp else None
        self.down = nn.Linear(f, h, bias=m.linear_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m, (b, s, _) = self.m, x.shape
        y = self.norm1(x)
        q = self.q(y).view(b, s, m.num_attention_heads, m.head_dim).transpose(1, 2)
        k = self.k(y).view(b, s, m.num_kv_heads, m.head_dim).transpose(1, 2)
        v = self.v(y).view(b, s, m.num_kv_heads, m.head_dim).transpose(1, 2)
        rep = m.num_attention_heads // m.num_kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) / m.head_dim**0.5
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        attn = torch.matmul(scores.masked_fill(mask, float("-inf")).softmax(-1), v)
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, m.q_dim))
        y = self.norm2(x)
        kind, up = m.mlp_activation.value, self.up(y)
        if self.gate is not None:
            gate = self.gate(y)
            act = (nn.functional.silu(gate) if kind == "swiglu" else nn.functional.gelu(gate)) * up
        else:
            act = torch.pow(nn.functional.relu(up), 2) if kind == "squared_relu" else nn.functional.gelu(up)
        out: torch.Tensor = x + self.down(act)
        return out


class Reference(nn.Module):
    def __init__(self, m: ModelSpec) -> None:
        super().__init__()
        self.embed = nn.Embedding(m.vocab_size, m.hidden_size)
        self.pos = nn.Embedding(m.learned_positions, m.hidden_size) if m.learned_positions else None
        self.blocks = nn.ModuleList(Block(m) for _ in range(m.num_layers))
        self.norm = (nn.LayerNorm if m.norm is Norm.LAYERNORM else nn.RMSNorm)(m.hidden_size)
        self.head = None if m.tied_embeddings else nn.Linear(m.hidden_size, m.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        logits: torch.Tensor = self.head(x) if self.head is not None else x @ self.embed.weight.T
        return logits


class Head(nn.Module):
    """Final norm, one TP rank's share of the LM head, and cross-entropy over that share: returns the loss."""

    def __init__(self, m: ModelSpec, tp: int = 1) -> None:
        super().__init__()
        self.norm = (nn.LayerNorm if m.norm is Norm.LAYERNORM else nn.RMSNorm)(m.hidden_size)
        self.out = nn.Linear(m.hidden_size, max(1, m.vocab_size // tp), bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.out(self.norm(x)).float()
        target = torch.zeros(logits.shape[:-1], dtype=torch.long, device=x.device)
        return nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
