"""Edge search: the contiguous split of a transformer's layers over a few devices (in each distinct order of them,
up to 4 devices; a device may be left out) that minimises request latency or the pipeline's bottleneck stage
under each device's memory.

Exact dynamic program over (device, layers placed), the structure of planner/search/partition.py:
    f[i][j] = min( f[i−1][j],                                   device i−1 left out
                   min over a < j of  f[i−1][a] ⊕ cost_i(a, j) ) layers [a, j) on device i, if they fit
with ⊕ = + for latency (prefill + output_len x decode step + the hops into each stage after the first) and
⊕ = max for throughput (decode step of a micro-batch + its hop in; the pipeline's token rate is the micro-batch
over the slowest stage). Stage sums are prefix sums, so a split costs O(k·L²). `brute_force` enumerates every
composition for the tests.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from meshcore import GIB, ClusterSpec, ModelSpec
from meshcore.errors import InfeasibleError
from meshcore.inference import Objective
from planner.workloads.edge.cost import DeviceCosts, device_costs
from planner.workloads.edge.spec import EdgeJob

MAX_ORDERED = 4  # devices whose orders are all tried


@dataclass(frozen=True)
class EdgeStage:
    device: str
    first_layer: int
    num_layers: int
    decode_s: float
    prefill_s: float
    memory_gib: float
    capacity_gib: float


@dataclass(frozen=True)
class EdgePlan:
    """Stages in pipeline order (devices left out are absent); latencies in seconds."""

    stages: tuple[EdgeStage, ...]
    ttft_s: float
    tpot_s: float
    e2e_s: float
    tokens_per_s: float
    bottleneck_s: float
    objective_value: float
    orders_tried: int


class _Prefix:
    """Prefix sums of one device's per-layer costs."""

    def __init__(self, c: DeviceCosts) -> None:
        self.c = c
        self.dec = list(itertools.accumulate(c.decode, initial=0.0))
        self.pre = list(itertools.accumulate(c.prefill, initial=0.0))
        self.mem = list(itertools.accumulate(c.memory, initial=0.0))

    def stage(self, a: int, b: int, layers: int, tied: bool) -> tuple[float, float, float]:
        """(decode, prefill, memory) of layers [a, b) on this device, with the embedding (a = 0), the LM head
        (b = L; a tied head needs its own copy away from the embedding) and the hop into the stage (a > 0)."""
        c = self.c
        dec, pre, mem = self.dec[b] - self.dec[a], self.pre[b] - self.pre[a], self.mem[b] - self.mem[a]
        if a == 0:
            mem += c.embedding_bytes
        else:
            dec, pre = dec + c.hop_decode, pre + c.hop_prefill
        if b == layers:
            dec, pre = dec + c.head_decode, pre + c.head_prefill
            mem += c.embedding_bytes if tied and a > 0 else c.head_bytes
        return dec, pre, mem


def _value(job: EdgeJob, dec: float, pre: float) -> float:
    return dec if job.objective is Objective.THROUGHPUT else pre + job.output_len * dec


def _combine(job: EdgeJob, acc: float, stage: float) -> float:
    return max(acc, stage) if job.objective is Objective.THROUGHPUT else acc + stage


def _dp(devices: Sequence[_Prefix], job: EdgeJob, layers: int, tied: bool) -> tuple[float, list[tuple[int, int]]]:
    """Best value and the stages (device index, end layer) of one device order."""
    k, inf = len(devices), math.inf
    f = [[inf] * (layers + 1) for _ in range(k + 1)]
    arg: list[list[int]] = [[-1] * (layers + 1) for _ in range(k + 1)]
    f[0][0] = 0.0
    for i in range(1, k + 1):
        dev = devices[i - 1]
        for j in range(layers + 1):
            best, where = f[i - 1][j], j  # device left out
            for a in range(j):
                if f[i - 1][a] == inf:
                    continue
                dec, pre, mem = dev.stage(a, j, layers, tied)
                if mem > dev.c.capacity:
                    continue
                value = _combine(job, f[i - 1][a], _value(job, dec, pre))
                if value < best:
                    best, where = value, a
            f[i][j], arg[i][j] = best, where
    stages, j = [], layers
    for i in range(k, 0, -1):
        a = arg[i][j]
        if a != j and a >= 0:
            stages.append((i - 1, j))
        j = a if a >= 0 else j
    return f[k][layers], stages[::-1]


def _orders(devices: Sequence[ClusterSpec]) -> list[tuple[int, ...]]:
    """Distinct orders of the devices by name (all of them up to MAX_ORDERED devices, else the given one)."""
    if len(devices) > MAX_ORDERED:
        return [tuple(range(len(devices)))]
    seen, out = set(), []
    for perm in itertools.permutations(range(len(devices))):
        names = tuple(devices[i].name for i in perm)
        if names not in seen:
            seen.add(names)
            out.append(perm)
    return out


def _micro(job: EdgeJob, devices: int) -> int:
    """Sequences per micro-batch: latency runs the batch as one; throughput spreads it over the stages."""
    return job.batch if job.objective is Objective.LATENCY else math.ceil(job.batch / min(job.batch, devices))


def _plan(model: ModelSpec, job: EdgeJob, prefixes: Sequence[_Prefix], stages: list[tuple[int, int]],
          value: float, orders: int) -> EdgePlan:
    out, start, dec_sum, pre_sum, worst = [], 0, 0.0, 0.0, 0.0
    for idx, end in stages:
        p = prefixes[idx]
        dec, pre, mem = p.stage(start, end, model.num_layers, model.tied_embeddings)
        out.append(EdgeStage(p.c.name, start, end - start, dec, pre, mem / GIB, p.c.capacity / GIB))
        dec_sum, pre_sum, worst, start = dec_sum + dec, pre_sum + pre, max(worst, dec), end
    micro = _micro(job, len(stages))
    m = math.ceil(job.batch / micro)
    tpot = max(dec_sum, m * worst)
    e2e = pre_sum + job.output_len * tpot
    return EdgePlan(tuple(out), pre_sum, tpot, e2e, job.batch / tpot, worst, value, orders)


def search_edge(model: ModelSpec, devices: Sequence[ClusterSpec], job: EdgeJob) -> EdgePlan:
    """The best split of `model` over `devices` for `job` (exact); InfeasibleError when no split fits."""
    micro = _micro(job, len(devices))
    costs = [_Prefix(device_costs(model, d, job, micro)) for d in devices]
    best: tuple[float, list[tuple[int, int]]] | None = None
    orders = _orders(devices)
    for order in orders:
        value, stages = _dp([costs[i] for i in order], job, model.num_layers, model.tied_embeddings)
        if value < math.inf and (best is None or value < best[0]):
            best = (value, [(order[i], end) for i, end in stages])
    if best is None:
        need = sum(costs[0].c.memory) + costs[0].c.embedding_bytes + costs[0].c.head_bytes
        have = sum(c.c.capacity for c in costs)
        raise InfeasibleError(f"{model.name} does not fit on {', '.join(d.name for d in devices)}: it needs "
                              f"{need / GIB:.1f} GiB of weights and KV cache, the devices offer {have / GIB:.1f} GiB "
                              "after --reserve-gib; use int4 weights, a shorter context, fewer sequences or more "
                              "devices")
    return _plan(model, job, costs, best[1], best[0], len(orders))


def compositions(layers: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to cut `layers` into `parts` contiguous, possibly empty, runs (their lengths)."""
    for cuts in itertools.combinations_with_replacement(range(layers + 1), parts - 1):
        bounds = (0, *cuts, layers)
        yield tuple(bounds[i + 1] - bounds[i] for i in range(parts))


def brute_force(model: ModelSpec, devices: Sequence[ClusterSpec], job: EdgeJob) -> float:
    """The best objective value by pricing every composition in every order (tests only: exponential)."""
    micro = _micro(job, len(devices))
    costs = [_Prefix(device_costs(model, d, job, micro)) for d in devices]
    best = math.inf
    for order in _orders(devices):
        for sizes in compositions(model.num_layers, len(devices)):
            value, start, ok = 0.0, 0, True
            for idx, n in zip(order, sizes, strict=True):
                if n == 0:
                    continue
                dec, pre, mem = costs[idx].stage(start, start + n, model.num_layers, model.tied_embeddings)
                ok = ok and mem <= costs[idx].c.capacity
                value, start = _combine(job, value, _value(job, dec, pre)), start + n
            if ok:
                best = min(best, value)
    return best
