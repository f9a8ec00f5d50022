"""Measure collectives with torch.distributed and fit the α-β model of cost_models.comm.collectives.

Each of all_reduce, all_gather, reduce_scatter, all_to_all and send/recv is timed over message sizes
(warm-up, repeats, median of the slowest rank), converted to bus bandwidth with the nccl-tests
conventions (busbw = size/time x factor; factors in cost_models.comm.collectives), and fitted to
t = α + factor·S / B (α from the smallest messages, B from the largest). The fit becomes a
hardware-profile fragment for the tier the processes share
(`node:` scale-up bandwidth and latency at efficiency 1, since B is already what was achieved), which
`--hardware PRESET,fragment.yaml` merges over a preset. torch is imported only here ([profile] extra).
"""

from __future__ import annotations

import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from cost_models.comm.collectives import Collective, bandwidth_factor

SIZES = tuple(2**k for k in range(12, 23, 2))  # 4 KiB .. 4 MiB (float32 elements x 4 bytes)
WARMUP = 3


@dataclass(frozen=True)
class Sample:
    collective: Collective
    nbytes: int
    seconds: float

    def busbw(self, world: int) -> float:
        return self.nbytes / self.seconds * bandwidth_factor(self.collective, world)


@dataclass(frozen=True)
class Fit:
    collective: Collective
    alpha_s: float
    busbw_bytes_per_s: float


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _time(op, dist, repeats: int) -> float:  # type: ignore[no-untyped-def]
    import torch

    times = []
    for i in range(repeats + WARMUP):
        dist.barrier()
        start = time.perf_counter()
        op()
        elapsed = torch.tensor([time.perf_counter() - start])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if i >= WARMUP:
            times.append(float(elapsed))
    return statistics.median(times)


def _worker(rank: int, world: int, port: int, backend: str, repeats: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    # torch 2.13 renamed the tensor-in, tensor-out collectives; older releases have only the old names
    gather: Callable[..., object] = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter: Callable[..., object] = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    for nbytes in SIZES:
        n = nbytes // 4
        x = torch.ones(n, device=device)
        part = torch.ones(n // world, device=device)

        def send_recv(x: torch.Tensor = x) -> None:  # ranks 0 and 1 exchange; the others wait at the barrier
            if rank == 0:
                dist.send(x, 1)
            elif rank == 1:
                dist.recv(x, 0)

        ops: dict[Collective, Callable[[], object]] = {
            Collective.ALL_REDUCE: partial(dist.all_reduce, x),
            Collective.ALL_GATHER: partial(gather, x, part),
            Collective.REDUCE_SCATTER: partial(scatter, part, x),
            Collective.ALL_TO_ALL: partial(dist.all_to_all_single, torch.empty_like(x), x),
            Collective.SEND_RECV: send_recv,
        }
        for kind, op in ops.items():
            row = f"{kind.value},{nbytes},{_time(op, dist, repeats)!r}\n"
            if rank == 0:  # one line per measurement as it is taken: the parent counts them for its progress bar
                with open(out, "a") as f:
                    f.write(row)
    dist.destroy_process_group()


def measure(backend: str = "gloo", procs: int = 2, repeats: int = 5,
            progress: Callable[[int, int], None] | None = None) -> list[Sample]:
    """Spawn `procs` processes and time every collective at every size; `progress(done, total)` is called with
    the measurements taken so far while they run."""
    import torch.multiprocessing as mp

    total = len(SIZES) * len(Collective)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "samples.csv"
        out.touch()
        workers = mp.spawn(_worker, args=(procs, _free_port(), backend, repeats, str(out)), nprocs=procs,
                           join=False)
        while not workers.join(timeout=0.5):
            if progress is not None:
                progress(min(out.read_text().count("\n"), total), total)
        lines = out.read_text().split()
    if progress is not None:
        progress(len(lines), total)
    return [Sample(Collective(k), int(n), float(t)) for k, n, t in (line.split(",") for line in lines)]


def fit(samples: list[Sample], world: int) -> list[Fit]:
    """α-β per collective: α from the smallest messages, B from the largest (t − α = factor·S/B).

    A least-squares line through CPU timings is at the mercy of one noisy point (its slope can come out
    negative); the two ends of the size range each pin one parameter, medians absorb the noise."""
    fits = []
    for kind in Collective:
        rows = sorted((s for s in samples if s.collective is kind), key=lambda s: s.nbytes)
        alpha = statistics.median(s.seconds for s in rows[:2])
        large = rows[-2:]
        rates = [s.nbytes * bandwidth_factor(kind, world) / (s.seconds - alpha) for s in large if s.seconds > alpha]
        busbw = statistics.median(rates) if rates else max(s.busbw(world) for s in large)
        fits.append(Fit(kind, max(alpha, 1e-7), busbw))
    return fits


def fragment(fits: list[Fit], samples: list[Sample], backend: str, world: int) -> str:
    """A hardware-profile fragment (scale-up tier) with the measurements as comments."""
    ar = next(f for f in fits if f.collective is Collective.ALL_REDUCE)
    lines = [f"# Measured by `meshplan profile network --backend {backend} --procs {world}`: alpha-beta fits",
             "# (t = alpha + factor * bytes / busbw, nccl-tests factors) per collective:"]
    lines += [f"#   {f.collective.value:15} alpha {f.alpha_s * 1e6:9.1f} us   "
              f"busbw {f.busbw_bytes_per_s / 1e9:8.3f} GB/s" for f in fits]
    lines.append("# samples (bytes: seconds):")
    for kind in Collective:
        row = ", ".join(f"{s.nbytes}: {s.seconds:.3g}" for s in samples if s.collective is kind)
        lines.append(f"#   {kind.value}: {row}")
    lines += ["# Merge over a preset with --hardware PRESET,this_file.yaml (all-reduce fit shown below).",
              "node:", f"  scale_up_gbs: {ar.busbw_bytes_per_s / 1e9:.6e}",
              f"  scale_up_latency_us: {max(ar.alpha_s * 1e6 / (2 * (world - 1)), 0.1):.6e}",
              "  scale_up_efficiency: 1.0", ""]
    return "\n".join(lines)
