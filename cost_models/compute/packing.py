"""Packed (variable-length) sequences: several documents concatenated into one training sequence, each attending only
to itself.

SFT and many pre-training pipelines pack documents into sequences of length s and pass their boundaries to the
attention kernel (Megatron-core's PackedSeqParams with cu_seqlens, Transformer Engine's / FlashAttention's THD
"varlen" kernels; torchtitan's document masking with flex attention), so a token attends causally to the earlier
tokens of its own document only. A sequence of documents of lengths L_1 ... L_n (Σ L_i = s) then computes
    pairs = Σ_i L_i (L_i + 1) / 2   instead of   s (s + 1) / 2
(query, key) pairs: a causal block per document on the diagonal. The GEMMs, norms and communication see the same
s tokens, so only the attention core shrinks. Each document is a separate problem for the kernel, whose rate
depends on its key length (`compute.attention_efficiency`): the work-weighted key length Σ L_i³ / Σ L_i² (the
length of the document an average (query, key) pair belongs to) prices it.

The job gives the document lengths (`JobSpec.packed_doc_lens`); they are laid into each sequence in order, repeated
as needed, and the document that reaches the end is cut at s (the packers of Megatron-Bridge's packed SFT datasets
and torchtitan's document masking cut or start a new sequence the same way). A single length L is the common case:
⌊s/L⌋ documents of L and one of s mod L."""

from __future__ import annotations

from meshcore import ModelSpec


def documents(seq_len: int, lengths: tuple[int, ...]) -> list[int]:
    """The documents of one packed sequence: `lengths` in order, repeated, the last cut at `seq_len` (one document of
    `seq_len` when `lengths` is empty)."""
    if not lengths:
        return [seq_len]
    out: list[int] = []
    left, i = seq_len, 0
    while left > 0:
        n = min(lengths[i % len(lengths)], left)
        out.append(n)
        left -= n
        i += 1
    return out


def _pairs(length: float, window: float) -> float:
    """Causal (query, key) pairs of one document of `length` tokens, with a sliding window `window` (0: none):
    L²/2 without a window or when L ≤ w, L·w − w²/2 with one (Longformer's band, as flops.attended_fraction)."""
    if window and length > window:
        return length * window - window * window / 2
    return length * length / 2


def packed_attended_fraction(model: ModelSpec, seq_len: int, lengths: tuple[int, ...]) -> float:
    """Mean over the decoder layers of the causal (query, key) pairs a packed sequence computes, over s² (the
    convention of `flops.attended_fraction`, which this equals for one document): Σ_i pairs(L_i) / s², with the
    sliding window on `ModelSpec.windowed_layers` of the layers. Bidirectional models (no causal mask) attend within
    each document in full: Σ_i L_i² / s²."""
    docs = documents(seq_len, lengths)
    s2 = float(seq_len) ** 2
    if not model.causal:
        return sum(float(d) ** 2 for d in docs) / s2
    full = sum(_pairs(d, 0.0) for d in docs) / s2
    windowed = model.windowed_layers(seq_len)
    if not windowed:
        return full
    band = sum(_pairs(d, float(model.sliding_window)) for d in docs) / s2
    n = model.num_layers
    return (windowed * band + (n - windowed) * full) / n


def packed_key_len(seq_len: int, lengths: tuple[int, ...]) -> float:
    """The work-weighted key length of a packed sequence's attention, Σ L_i³ / Σ L_i² (equal to s for one
    document): the length the attention kernel's rate is read at."""
    docs = documents(seq_len, lengths)
    return sum(float(d) ** 3 for d in docs) / sum(float(d) ** 2 for d in docs)


__all__ = ["documents", "packed_attended_fraction", "packed_key_len"]
