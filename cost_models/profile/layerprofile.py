"""Measure layers with PyTorch: the rows of a cost table (cost_models/profile/tables.py).

Real layers are built at the model's dimensions (or scaled down with `scale` to fit a CPU): a decoder
layer as one TP rank holds it (heads, KV heads and FFN divided by tp), the vocabulary-parallel
embedding and the LM head with the final norm and cross-entropy. Decoder layers of Llama-shaped
models (gated MLP, RMSNorm, no biases) are Hugging Face's LlamaDecoderLayer with PyTorch's fused
attention when transformers is installed, else the project's reference block
(cost_models.profile.torch_reference, explicit attention). Each is timed forward and
backward (warm-up, repeats, median; CUDA events on a GPU, perf_counter on a CPU); the activations are
the forward's peak allocation on a GPU (max_memory_allocated; the GPU runs bf16), and on a CPU the
tensors saved for backward, counted with saved-tensor hooks (parameters excluded) and recorded at
16-bit size, as training keeps them; parameters and output bytes are recorded too. torch is imported only
here ([profile] extra).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from meshcore import ModelSpec
from meshcore.errors import InputError


@dataclass(frozen=True)
class Row:
    kind: str
    count: int
    tp: int
    mbs: int
    seq_len: int
    forward_ms: float
    backward_ms: float
    activation_bytes: float
    params: int
    output_bytes: int


def scaled(model: ModelSpec, scale: float) -> ModelSpec:
    """The model with heads, KV heads, FFN and vocabulary scaled by `scale` (head size kept)."""
    if not 0 < scale <= 1:
        raise InputError(f"--scale must be in (0, 1], got {scale}")
    if scale == 1:
        return model
    heads = max(1, round(model.num_attention_heads * scale))
    kv = max(1, min(heads, round(model.num_kv_heads * scale)))
    while heads % kv:
        kv -= 1
    return replace(model, name=f"{model.name}@{scale:g}", hidden_size=heads * model.head_dim,
                   num_attention_heads=heads, num_kv_heads=kv,
                   ffn_hidden_size=max(1, round(model.ffn_hidden_size * scale)),
                   vocab_size=max(8, round(model.vocab_size * scale)))


def shard(model: ModelSpec, tp: int) -> ModelSpec:
    """What one TP rank holds of a decoder layer."""
    if model.num_attention_heads % tp:
        raise InputError(f"--tp {tp} does not divide the {model.num_attention_heads} attention heads of {model.name}")
    return replace(model, num_attention_heads=model.num_attention_heads // tp,
                   num_kv_heads=max(1, model.num_kv_heads // tp), ffn_hidden_size=model.ffn_hidden_size // tp)


def _timer(device: Any) -> Callable[[Callable[[], Any]], float]:
    import torch

    def run(fn: Callable[[], Any]) -> float:
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return float(start.elapsed_time(end)) / 1e3
        begin = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - begin) / 1e9

    return run


def _forward(module: Any, x: Any, out: list[Any]) -> None:
    out.append(module(x))


def _measure(module: Any, make_input: Callable[[], Any], loss_of: Callable[[Any], Any], device: Any,
             repeats: int) -> tuple[float, float, float, int]:
    """(forward s, backward s, saved activation bytes at 16-bit, output bytes)."""
    import torch

    params = {p.data_ptr() for p in module.parameters()}
    timer = _timer(device)
    fwd, bwd, saved = [], [], 0.0
    for i in range(repeats + 2):
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor, seen: dict[int, int] = seen) -> torch.Tensor:
            if t.data_ptr() not in params:
                seen[t.data_ptr()] = t.numel() * 2  # 16-bit, as training stores them
            return t

        x = make_input()
        out: list[Any] = []
        if device.type == "cuda":
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            f = timer(partial(_forward, module, x, out))
        if device.type == "cuda":  # what the forward left allocated at its peak, as the allocator saw it
            seen.clear()
            seen[0] = torch.cuda.max_memory_allocated(device) - base
        loss = loss_of(out[0])
        b = timer(loss.backward)
        module.zero_grad(set_to_none=True)
        if i >= 2:
            fwd.append(f)
            bwd.append(b)
            saved = float(sum(seen.values()))
    return statistics.median(fwd), statistics.median(bwd), saved, out[0].numel() * 2


def decoder_module(part: ModelSpec) -> tuple[Any, str]:
    """One TP rank's decoder layer, and what built it."""
    from cost_models.profile.torch_reference import Block

    llama_like = (part.mlp_activation.value == "swiglu" and part.norm.value == "rmsnorm"
                  and not (part.qkv_bias or part.linear_bias))
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    except ImportError:
        return Block(part), "reference block"
    if not llama_like:
        return Block(part), "reference block"
    import torch

    config = LlamaConfig(hidden_size=part.hidden_size, intermediate_size=part.ffn_hidden_size,
                         num_attention_heads=part.num_attention_heads, num_key_value_heads=part.num_kv_heads,
                         head_dim=part.head_dim, vocab_size=part.vocab_size, num_hidden_layers=1)
    config._attn_implementation = "sdpa"

    class HFDecoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = LlamaDecoderLayer(config, 0)
            self.rope = LlamaRotaryEmbedding(config)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(x.shape[1], device=x.device)[None]
            out = self.layer(x, position_embeddings=self.rope(x, pos), position_ids=pos)
            hidden: torch.Tensor = out[0] if isinstance(out, tuple) else out
            return hidden

    return HFDecoder(), "transformers LlamaDecoderLayer"


def profile_layers(model: ModelSpec, tps: list[int], mbss: list[int], seq_len: int, device_name: str,
                   repeats: int, progress: Callable[[int, int], None] | None = None) -> list[Row]:
    """Time the decoder layer, the embedding and the LM head of `model` sharded for each TP degree, at each
    micro-batch size; `progress(done, total)` after each of them."""
    import torch

    from cost_models.profile.torch_reference import Head

    device = torch.device(device_name)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    rows = []
    for tp in tps:
        part = shard(model, tp)
        block = decoder_module(part)[0].to(device, dtype)
        embed = torch.nn.Embedding(max(1, model.vocab_size // tp), model.hidden_size).to(device, dtype)
        head = Head(model, tp).to(device, dtype)
        for mbs in mbss:
            def hidden(mbs: int = mbs) -> Any:
                return torch.randn(mbs, seq_len, model.hidden_size, device=device, dtype=dtype, requires_grad=True)

            def tokens(mbs: int = mbs, tp: int = tp) -> Any:
                return torch.randint(0, max(1, model.vocab_size // tp), (mbs, seq_len), device=device)

            cases = (("decoder", model.num_layers, block, hidden, lambda y: y.float().sum()),
                     ("embedding", 1, embed, tokens, lambda y: y.float().sum()),
                     ("lm_head", 1, head, hidden, lambda y: y))
            for kind, count, module, make, loss in cases:
                f, b, act, out = _measure(module, make, loss, device, repeats)
                n_params = sum(p.numel() for p in module.parameters())
                rows.append(Row(kind, count, tp, mbs, seq_len, f * 1e3, b * 1e3, act, n_params, out))
                if progress is not None:
                    progress(len(rows), 3 * len(tps) * len(mbss))
    return rows


def table(model: ModelSpec, rows: list[Row], device_name: str) -> str:
    """The cost-table CSV (cost_models/profile/tables.py documents the columns)."""
    import pandas as pd

    frame = pd.DataFrame([r.__dict__ for r in rows])
    frame["hidden_size"] = model.hidden_size
    frame["ffn_hidden_size"] = model.ffn_hidden_size
    frame["num_attention_heads"] = model.num_attention_heads
    frame["num_kv_heads"] = model.num_kv_heads
    frame["vocab_size"] = model.vocab_size
    frame["device"] = device_name
    return str(frame.to_csv(index=False))
