"""Price a layout's pipeline with the discrete-event simulator instead of the closed form.

Per-chunk op durations come from the cost model's stage costs (`cost_models.step`): a rank's forward
and backward times are shared among its model chunks in proportion to their layers (the embedding and
LM head stay on the first and last chunk's rank), communication inside a stage is split between
forward and backward in proportion to their compute, pipeline sends are the simulator's hop latency.
The step is the simulated pipeline plus the same tail (gradient reduction, optimizer, embedding sync)
as the closed form. Large pipelines are not simulated (the event loop is Python): `MAX_EVENTS`.
"""

from __future__ import annotations

from cost_models.pipeline.forms import W_SHARE
from cost_models.pipeline.schedules import program
from cost_models.pipeline.simulator import Durations, SimResult, makespan, simulate
from cost_models.prediction import Prediction
from cost_models.step import pipeline_hop_time
from meshcore import SPLIT_BACKWARD, ClusterSpec, JobSpec, Layout, ModelSpec

MAX_EVENTS = 200_000  # simulated ops x devices (the event loop scans the devices per op)


def simulable(pp: int, vpp: int, num_microbatches: int) -> bool:
    """Whether a layout of these degrees has its pipeline simulated (a plan then reports the simulated step): a
    pipeline of at most `MAX_EVENTS`."""
    return pp > 1 and 3 * num_microbatches * pp * vpp * pp <= MAX_EVENTS


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


def step_tail(prediction: Prediction) -> float:
    """What the step adds to the pipeline: gradient reduction, optimizer and embedding sync (the closed form's)."""
    b = prediction.breakdown
    return b.dp_comm_s + b.optimizer_s + b.embedding_sync_s


def simulated_step_time(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                        prediction: Prediction, durations_: Durations | None = None,
                        memo: dict[tuple[object, ...], float] | None = None) -> float | None:
    """Step time with the simulated pipeline, or None when the layout is too large to simulate (`durations_`: the
    layout's, when the caller has them). `memo`: makespans by (schedule, pp, micro-batches, vpp, durations), which
    are all the simulator reads: layouts that differ elsewhere (ZeRO stage, offload, degrees whose stages take the
    same times) share one run, the same float."""
    m = prediction.num_microbatches
    if not simulable(layout.pp, layout.vpp, m):
        return None
    d = durations_ if durations_ is not None else durations(model, cluster, job, layout, prediction)
    key = (layout.schedule, layout.pp, m, layout.vpp, d)
    found = memo.get(key) if memo is not None else None
    if found is None:
        found = makespan(program(layout.schedule, layout.pp, m, layout.vpp), d)
        if memo is not None:
            memo[key] = found
    return found + step_tail(prediction)
