"""Price a layout's pipeline with the discrete-event simulator instead of the closed form.

Per-chunk op durations come from the cost model's stage costs (`cost_models.step`): a rank's forward
and backward times are shared among its model chunks in proportion to their layers (the embedding and
LM head stay on the first and last chunk's rank), communication inside a stage is split between
forward and backward in proportion to their compute, pipeline sends are the simulator's hop latency.
The step is the simulated pipeline plus the same tail (gradient reduction, optimizer, embedding sync)
as the closed form. Large pipelines are not simulated (the event loop is Python): `MAX_EVENTS`.
"""

from __future__ import annotations

from cost_models.prediction import Prediction
from cost_models.schedules import SPLIT_BACKWARD, W_SHARE, program
from cost_models.simulator import Durations, SimResult, makespan, simulate
from cost_models.step import pipeline_hop_time
from planner.core import ClusterSpec, JobSpec, Layout, ModelSpec

MAX_EVENTS = 200_000  # simulated ops x devices scanned per op


def pipeline_events(layout: Layout, num_microbatches: int) -> int:
    ops = 3 * num_microbatches * layout.pp * layout.vpp
    return ops * layout.pp


def durations(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
              prediction: Prediction) -> Durations:
    chunks = layout.chunk_layers(model.num_layers)
    split = layout.schedule in SPLIT_BACKWARD
    fwd, bwd, wgt, act = [], [], [], []
    p2p = pipeline_hop_time(model, job, cluster, layout)
    for c, n_c in enumerate(chunks):
        stage = prediction.stages[layout.chunk_rank(c)]
        t = stage.time
        compute = t.forward + t.backward + t.recompute
        share = n_c / stage.num_layers if stage.num_layers else 1.0 / layout.vpp
        comm = t.tp_comm + t.cp_comm + t.ep_comm + t.host + stage.sharded_dp_exposed_s + stage.offload_s
        f = (t.forward + comm * t.forward / compute) * share
        b = (t.backward + t.recompute + comm * (1 - t.forward / compute)) * share
        w = W_SHARE * t.backward * share if split else 0.0
        fwd.append(f)
        bwd.append(b - w)
        wgt.append(w)
        act.append(stage.activations_gib * share)
    return Durations(tuple(fwd), tuple(bwd), tuple(wgt), tuple(act), p2p_s=p2p, w_share=W_SHARE)


def simulate_layout(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                    prediction: Prediction) -> SimResult:
    prog = program(layout.schedule, layout.pp, prediction.num_microbatches, layout.vpp)
    return simulate(prog, durations(model, cluster, job, layout, prediction))


def simulated_step_time(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                        prediction: Prediction) -> float | None:
    """Step time with the simulated pipeline, or None when the layout is too large to simulate."""
    if layout.pp == 1 or pipeline_events(layout, prediction.num_microbatches) > MAX_EVENTS:
        return None
    prog = program(layout.schedule, layout.pp, prediction.num_microbatches, layout.vpp)
    b = prediction.breakdown
    return (makespan(prog, durations(model, cluster, job, layout, prediction)) + b.dp_comm_s + b.optimizer_s
            + b.embedding_sync_s)
