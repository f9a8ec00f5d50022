"""Recommendation-model plan files (`meshplan recsys plan --out`): a mapping with `workload: recsys`, the inputs,
the prediction, each table's sharding and the TorchRec plan; and their text summary. The file is meshplan's own
(not plan.schema.json, which describes transformer plans), YAML or JSON by suffix."""

from __future__ import annotations

from typing import Any

from meshcore import GIB, ClusterSpec
from planner.outputs.planfile import MESHPLAN_VERSION
from planner.workloads.recsys.search import RecPlan
from planner.workloads.recsys.torchrec import compute_kernel, torchrec_plan


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def recsys_document(plan: RecPlan, cluster: ClusterSpec) -> dict[str, Any]:
    ev, job = plan.evaluation, plan.job
    local = min(cluster.gpus_per_node, job.gpus)
    return {
        "meshplan_version": MESHPLAN_VERSION, "workload": "recsys", "model": plan.model.name,
        "hardware": cluster.name, "gpus": job.gpus, "batch": job.batch, "host_gib_per_gpu": job.host_gib,
        "runtime": job.runtime.value,
        "prediction": {"step_time_s": _r(ev.step_s), "samples_per_s": _r(ev.samples_per_s),
                       "dense_compute_s": _r(ev.dense.compute_s), "dense_allreduce_exposed_s": _r(ev.dense.allreduce_s),
                       "embedding_s_per_rank": [_r(x) for x in ev.rank_s],
                       "host_s": _r(ev.step_s - ev.dense.compute_s - ev.dense.allreduce_s - max(ev.rank_s)),
                       "hbm_gib_per_rank": [_r(x / GIB) for x in ev.hbm_bytes],
                       "hbm_capacity_gib": _r(ev.hbm_capacity / GIB),
                       "host_gib_per_rank": [_r(x / GIB) for x in ev.host_bytes]},
        "search": {"solver": plan.solver, "optimal": plan.optimal, "gap": _r(plan.gap), "seconds": _r(plan.solve_s)},
        "tables": [{"name": s.table, "sharding_type": s.kind.value, "compute_kernel": compute_kernel(s),
                    "ranks": list(s.ranks)} for s in plan.shardings],
        "torchrec": torchrec_plan(plan.model, plan.shardings, local, job.cache_ratio),
    }


def recsys_summary(doc: dict[str, Any]) -> str:
    p = doc["prediction"]
    lines = [f"{doc['model']} on {doc['gpus']} x {doc['hardware']}, batch {doc['batch']}",
             f"step {p['step_time_s'] * 1e3:.3f} ms, {p['samples_per_s'] / 1e6:.2f} M samples/s "
             f"(dense {p['dense_compute_s'] * 1e3:.3f} ms + all-reduce {p['dense_allreduce_exposed_s'] * 1e3:.3f} ms "
             f"+ slowest rank's embeddings {max(p['embedding_s_per_rank']) * 1e3:.3f} ms"
             f"{' + host ' + format(p['host_s'] * 1e3, '.3f') + ' ms' if p.get('host_s') else ''}; "
             f"runtime {doc.get('runtime', 'torchrec')})",
             f"HBM per rank {min(p['hbm_gib_per_rank']):.1f}-{max(p['hbm_gib_per_rank']):.1f} GiB of "
             f"{p['hbm_capacity_gib']:.1f} GiB for tables; solver {doc['search']['solver']}, "
             f"{'optimal' if doc['search']['optimal'] else 'gap ' + str(doc['search']['gap'])}",
             "", f"{'table':<20} {'sharding':<14} {'kernel':<18} ranks"]
    for t in doc["tables"]:
        ranks = t["ranks"] if len(t["ranks"]) <= 8 else f"all {len(t['ranks'])}"
        lines.append(f"{t['name']:<20} {t['sharding_type']:<14} {t['compute_kernel']:<18} {ranks}")
    return "\n".join(lines)
