"""Graph-interatomic-potential plan files (`meshplan mlip plan --out`): a mapping with `workload: mlip`, the inputs,
the best split and the alternatives; and their text summary. meshplan's own format (not plan.schema.json)."""

from __future__ import annotations

from typing import Any

from meshcore import GIB, ClusterSpec
from planner.outputs.planfile import MESHPLAN_VERSION
from planner.workloads.mlip.cost import MlipPrediction
from planner.workloads.mlip.lammps import lammps_input
from planner.workloads.mlip.mixed import MixedPrediction
from planner.workloads.mlip.search import MlipSearch
from planner.workloads.mlip.spec import MlipCostTable, MlipJob, MlipMode


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def mlip_document(search: MlipSearch, job: MlipJob, cluster: ClusterSpec, costs: str,
                  table: MlipCostTable | None = None) -> dict[str, Any]:
    """The plan file; an MD plan (job.mode md, `table` given) also carries the LAMMPS lines (lammps.py)."""
    def row(p: MlipPrediction) -> dict[str, Any]:
        return {"strategy": p.strategy.value, "replicas": p.replicas, "domains": p.domains,
                "grid": list(p.grid), "step_time_s": _r(p.step_s), "structures_per_s": _r(p.structures_per_s),
                "compute_s": _r(p.compute_s), "halo_s": _r(p.halo_s), "allreduce_s": _r(p.allreduce_s),
                "memory_gib": _r(p.memory_bytes / GIB), "fits": p.fits}

    doc = {"meshplan_version": MESHPLAN_VERSION, "workload": "mlip", "mode": job.mode.value, "costs": costs,
           "hardware": cluster.name, "gpus": job.gpus, "atoms": job.atoms, "structures": job.structures,
           "best": row(search.best), "alternatives": [row(p) for p in search.ranked[1:]],
           "candidates": search.candidates}
    if job.mode is MlipMode.MD and table is not None:
        doc["lammps"] = lammps_input(search.best, table, cluster)
    return doc


def mlip_summary(doc: dict[str, Any]) -> str:
    b = doc["best"]
    md = doc.get("mode") == MlipMode.MD.value
    rate = (f"{b['structures_per_s']:.4g} MD steps/s, {b['structures_per_s'] * doc['atoms']:.4g} atom-steps/s"
            if md else f"{b['structures_per_s']:.4g} structures/s")
    lines = [f"{'MD of one box' if md else str(doc['structures']) + ' structure(s)'} of {doc['atoms']} atoms on "
             f"{doc['gpus']} x {doc['hardware']} (costs: {doc['costs']})",
             f"best: {b['replicas']} replica(s) x {b['domains']} domain(s) (grid {'x'.join(map(str, b['grid']))}), "
             f"step {b['step_time_s'] * 1e3:.3f} ms, {rate}, {b['memory_gib']:.2f} GiB per GPU", "",
             f"{'replicas':>8} {'domains':>7} {'grid':>8} {'step ms':>10} {'compute':>9} {'halo':>9} {'fits':>5}"]
    for r in [b] + doc["alternatives"]:
        lines.append(f"{r['replicas']:>8} {r['domains']:>7} {'x'.join(map(str, r['grid'])):>8} "
                     f"{r['step_time_s'] * 1e3:>10.3f} {r['compute_s'] * 1e3:>9.3f} {r['halo_s'] * 1e3:>9.3f} "
                     f"{'yes' if r['fits'] else 'no':>5}")
    if "lammps" in doc:
        lam = doc["lammps"]
        lines += ["", f"LAMMPS ({lam['note']}):", *(f"  {x}" for x in lam["input"]), f"  {lam['launch']}"]
    return "\n".join(lines)


def mixed_document(p: MixedPrediction, sizes: tuple[int, ...], cluster: ClusterSpec, costs: str,
                   sizes_file: str) -> dict[str, Any]:
    """The plan file of a step over structures of different sizes (mixed.py): each replica's structures."""
    part = p.partition
    return {"meshplan_version": MESHPLAN_VERSION, "workload": "mlip", "mode": MlipMode.TRAIN.value, "costs": costs,
            "sizes": sizes_file, "hardware": cluster.name, "gpus": p.replicas, "structures": p.structures,
            "atoms_total": sum(sizes),
            "best": {"strategy": "data_parallel", "balanced_by": "atoms", "replicas": p.replicas,
                     "step_time_s": _r(p.step_s), "structures_per_s": _r(p.structures_per_s),
                     "compute_s": _r(p.compute_s), "allreduce_s": _r(p.allreduce_s),
                     "memory_gib": _r(p.memory_bytes / GIB), "fits": p.memory_bytes <= p.memory_capacity,
                     "largest_share_atoms": part.makespan, "lower_bound_atoms": part.lower_bound,
                     "exact": part.exact, "replica_atoms": list(part.loads),
                     "replica_structures": [list(g) for g in part.groups]},
            "by_count": {"sampler": "DistributedSampler (MACE), mean over seeded shuffles",
                         "step_time_s": _r(p.by_count_step_s), "largest_share_atoms": _r(p.by_count_max_atoms),
                         "shuffles_out_of_memory": _r(p.by_count_too_big)}}


def mixed_summary(doc: dict[str, Any]) -> str:
    b, c = doc["best"], doc["by_count"]
    proof = ("exact" if b["exact"] else
             f"within LPT's bound of the lower bound {b['lower_bound_atoms']} atoms")
    return "\n".join([
        f"{doc['structures']} structure(s), {doc['atoms_total']} atoms, on {doc['gpus']} x {doc['hardware']} "
        f"(costs: {doc['costs']}, sizes: {doc['sizes']})",
        f"balanced by atoms: largest share {b['largest_share_atoms']} atoms ({proof}), step "
        f"{b['step_time_s'] * 1e3:.3f} ms, {b['structures_per_s']:.4g} structures/s, {b['memory_gib']:.2f} GiB per "
        "GPU",
        f"dealt by count (MACE's DistributedSampler, mean of shuffles): largest share "
        f"{c['largest_share_atoms']:.1f} atoms, step {c['step_time_s'] * 1e3:.3f} ms "
        f"({c['step_time_s'] / b['step_time_s']:.3g} x the balanced step)"
        + (f"; {c['shuffles_out_of_memory']:.0%} of shuffles leave a GPU a share that does not fit"
           if c["shuffles_out_of_memory"] else "")])
