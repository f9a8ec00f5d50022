"""The kernels of a mixture-of-experts layer on one GPU beside its all-to-alls: the token permutations that group the
routed copies by expert and restore them, and how the experts' GEMMs are issued (grouped or one after another).

Both are read from what Megatron-core runs (megatron/core/transformer/moe/, token_dispatcher.py and experts.py at
NVIDIA/Megatron-LM 2026-08) with Transformer Engine's kernels (transformer_engine/pytorch/module/grouped_linear.py,
transformer_engine/common/util/multi_stream.h)."""

from __future__ import annotations

from cost_models.compute.kernels import Gemm
from meshcore.execution import ExpertGemms

# Transformer Engine's grouped GEMM (GroupedLinear -> general_grouped_gemm -> nvte_multi_stream_cublas_gemm) issues
# one cuBLAS GEMM per expert round-robin on its compute streams: `num_compute_streams = 4` in
# transformer_engine/common/util/multi_stream.h, so up to four experts' GEMMs run at once.
TE_GROUPED_STREAMS = 4


def permutation_bytes(copies: float, hidden: int, local_experts: float, dedup: bool) -> tuple[float, float]:
    """(forward, backward) HBM bytes one MoE layer's token permutations move on one rank, for `copies` routed
    copies of `hidden`-wide bf16 tokens computed there (2 bytes per element; each kernel reads and writes every
    copy once: 4·h bytes per copy and permutation).

    All-to-all dispatcher (MoEAlltoAllTokenDispatcher, `dedup` False), forward:
      dispatch_preprocess   `permute`: gather the rank's tokens into k copies ordered by destination expert;
      dispatch_postprocess  `sort_chunks_by_idxs`: the received chunks (ordered by source rank) re-sorted by local
                            expert, only when the rank holds more than one expert (permutation 2);
      combine_preprocess    the same sort undone before the combine all-to-all;
      combine_postprocess   `unpermute`: the k copies weighted by their router probabilities and summed back
                            into the token order (reads the copies, writes k times fewer: counted as a full pass).
    Four passes with several local experts, two with one: 16·h or 8·h bytes per copy.
    Flex dispatcher (DeepEP / HybridEP, `dedup` True): the dispatch kernel reads the tokens where they lie and
    writes them into the receiving rank's buffer (communication, priced with the all-to-all); the received tokens
    are then permuted to local-expert order and unpermuted after the experts (get_permuted_hidden_states_by_experts,
    get_restored_hidden_states_by_experts): two passes, 8·h bytes per copy.
    The backward of each permutation is the inverse permutation of the gradients: the same bytes.
    The fp32 probabilities that travel with the copies (4 bytes per copy per pass) are left out (under 0.1 % of
    the bytes for h ≥ 2048)."""
    passes = 2.0 if dedup or local_experts <= 1 else 4.0
    nbytes = passes * 4.0 * hidden * copies
    return nbytes, nbytes


def expert_gemms_concurrent(issue: ExpertGemms, local_experts: float) -> float:
    """How many of a rank's `local_experts` expert GEMMs run at once as the runtime issues them: Transformer
    Engine's streams (TE_GROUPED_STREAMS), all of them in one grouped kernel, or one at a time."""
    if issue is ExpertGemms.TE_STREAMS:
        return float(min(TE_GROUPED_STREAMS, local_experts))
    return local_experts if issue is ExpertGemms.ONE_KERNEL else 1.0


def expert_gemm_groups(gemm: Gemm, local_experts: float, concurrent: float) -> tuple[Gemm, float]:
    """(GEMM, how many) that prices `local_experts` experts' copies of `gemm` (one expert's GEMM on its share of the
    routed rows) when `concurrent` of them run at once.

    A GEMM's achievable share of peak grows with its work (`compute.gemm_efficiency`: launch latency, prologue and
    epilogue, the last partial wave of tiles are fixed costs). GEMMs that run side by side share those costs: c
    concurrent GEMMs of F FLOPs fill the GPU's SMs as one GEMM of c·F does, so they are priced as a batched GEMM of
    c copies (`Gemm.batch`, one kernel of the summed work), issued local_experts / c times:
        t = (E_l / c) · t_gemm(c x [m_e, n, k]),   c = min(concurrent, E_l)
    Megatron-core runs, with --moe-grouped-gemm, TEGroupedMLP: Transformer Engine's GroupedLinear on up to
    TE_GROUPED_STREAMS streams (c = 4); the legacy GroupedMLP (--moe-use-legacy-grouped-gemm) and
    torch._grouped_mm run all experts in one kernel (c = E_l); without --moe-grouped-gemm, SequentialMLP runs
    each expert's linear layers in turn (c = 1). FLOPs and cast bytes are unchanged: only the efficiency moves."""
    c = max(1.0, min(concurrent, local_experts))
    return Gemm(gemm.m, gemm.n, gemm.k, gemm.batch * c), local_experts / c


__all__ = ["TE_GROUPED_STREAMS", "expert_gemm_groups", "expert_gemms_concurrent", "permutation_bytes"]
