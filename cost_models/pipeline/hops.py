"""Where a pipeline rank sits in its layout: whether it holds the embedding or the LM head, what its pipeline sends
and receives cost per micro-batch, and how many micro-batches of activations it keeps in flight. They depend on the
layout's pipeline shape (pp, vpp, schedule, micro-batches) alone, not on its split, so cost_models.step reads them
once per rank (`rank_places`) for every stage it prices there."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.comm.collectives import send_recv
from cost_models.pipeline.schedules import in_flight
from meshcore import ClusterSpec, JobSpec, Layout, ModelSpec


def pipeline_hop_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, layout: Layout) -> float:
    """One pipeline send/recv of one micro-batch's activations (bf16, sharded over tp and cp); 0 without PP."""
    if layout.pp == 1:
        return 0.0
    nbytes = layout.mbs * job.seq_len / layout.cp * model.hidden_size * 2 / layout.tp
    return send_recv(nbytes, layout.mesh.pipeline_neighbours, cluster)


def p2p_exposure(layout: Layout, job: JobSpec, cluster: ClusterSpec) -> float:
    """Share of a rank's pipeline send/recv time on its critical path. Chunked schedules (vpp > 1) with
    `Runtime.overlap_p2p_comm` run each transfer beside another chunk's compute, so only the contention
    remains, κ = 1 − overlap_efficiency of it (`GpuSpec.exposed` when the compute is the longer, which a
    chunk's layers are against one activation transfer in any layout worth running; pricing it without the
    max keeps stage times affine in their layers, as the exact split search needs). Otherwise all of it."""
    if layout.vpp > 1 and job.runtime.overlap_p2p_comm:
        return 1.0 - cluster.gpu.overlap_efficiency
    return 1.0


def pipeline_hops(layout: Layout, rank: int) -> int:
    """Sends and receives of activations (or their gradients) `rank` makes per micro-batch and direction: one
    into each of its chunks from a chunk on another rank, one out of it to the next chunk on another rank."""
    chunks = layout.pp * layout.vpp
    hops = 0
    for c in layout.rank_chunks(rank):
        hops += c > 0 and layout.chunk_rank(c - 1) != rank
        hops += c < chunks - 1 and layout.chunk_rank(c + 1) != rank
    return hops


@dataclass(frozen=True)
class RankPlace:
    """Pipeline rank `rank`'s place: it holds the embedding (`first`), the LM head (`last`); `p2p_s`: its exposed
    pipeline sends and receives per micro-batch; `alive`: micro-batches of its activations in flight at its peak
    (cost_models.pipeline.schedules.in_flight)."""

    rank: int
    first: bool
    last: bool
    p2p_s: float
    alive: float


def every_rank_hops(layout: Layout) -> list[int]:
    """`pipeline_hops` of every rank, from one pass over the chunks: chunk c's rank counts a hop in from chunk c − 1
    and one out to chunk c + 1 where those live on another rank."""
    owner = [layout.chunk_rank(c) for c in range(layout.pp * layout.vpp)]
    hops = [0] * layout.pp
    for c, rank in enumerate(owner):
        hops[rank] += (c > 0 and owner[c - 1] != rank) + (c < len(owner) - 1 and owner[c + 1] != rank)
    return hops


def rank_places(layout: Layout, job: JobSpec, cluster: ClusterSpec, num_microbatches: int,
                hop_s: float) -> tuple[RankPlace, ...]:
    """Every rank's place, `hop_s` being one send/recv of one micro-batch (`pipeline_hop_time`): its sends are
    pipeline_hops · hop_s · p2p_exposure."""
    exposure, first, last = p2p_exposure(layout, job, cluster), layout.embedding_rank, layout.head_rank
    return tuple(RankPlace(rank, rank == first, rank == last, hops * hop_s * exposure,
                           in_flight(layout.schedule, rank, layout.pp, num_microbatches, layout.vpp))
                 for rank, hops in enumerate(every_rank_hops(layout)))
