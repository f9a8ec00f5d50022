"""Close the loop on a CPU: profile a small GPT, plan it for 2 processes, train real steps, compare.

    python benchmarks/closed_loop.py [--steps 4] [--layers 8]

1. `meshplan profile layers` times the scaled-down Llama-3-8B block (1/16 width) on this CPU.
2. `meshplan profile network` measures gloo collectives between 2 processes; the fragment replaces
   the scale-up tier of a base profile, so the planner prices communication as measured.
3. The planner predicts two layouts from the cost table: DP = 2, and PP = 2 (1F1B).
4. Two processes train the same model with torch.distributed (gloo): DP = 2 with gradient all-reduce,
   and PP = 2 with torch.distributed.pipelining's 1F1B schedule; the median step time is measured.
It prints predicted and measured step times and the error, and the predicted tensor memory per process
(weights, gradients, Adam state, activations; the GPU buffer allowance left out) next to how much the
busiest process's resident memory grew (which also holds the allocator's and Python's own
overheads). Each process uses half the cores, and so does the profiling run; the optimizer
step is priced at an assumed 10 GB/s of CPU memory bandwidth. torch is needed ([profile] extra).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SEQ, MBS, GBS = 128, 2, 8
THREADS = max(1, (os.cpu_count() or 2) // 2)  # each of the 2 processes gets its share of the cores
CPU_MEMORY_GBS = 10.0  # assumed memory bandwidth of this CPU for the optimizer step (not measured)


def _train(rank: int, world: int, port: int, mode: str, layers: int, steps: int, out: str) -> None:
    import resource

    import torch
    import torch.distributed as dist

    from cost_models.profile.layerprofile import decoder_module, scaled
    from cost_models.profile.torch_reference import Head
    from planner.inputs.loaders import load_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(THREADS)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    torch.manual_seed(0)
    spec = scaled(load_model("llama3-8b"), 0.0625)
    embed = torch.nn.Embedding(spec.vocab_size, spec.hidden_size)
    blocks = [decoder_module(spec)[0] for _ in range(layers)]  # the layer the profiler timed
    head = Head(spec)
    times: list[float] = []
    if mode == "dp":
        model = torch.nn.Sequential(embed, *blocks, head)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        micro = GBS // (world * MBS)
        for step in range(steps + 1):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(micro):
                model(torch.randint(0, spec.vocab_size, (MBS, SEQ))).backward()
            grads = [p.grad for p in model.parameters()]
            flat = torch.cat([g.reshape(-1) for g in grads])  # one bucket, as DDP would
            dist.all_reduce(flat)
            for grad, reduced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads), strict=True):
                grad.copy_(reduced / world)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step:
                times.append(time.perf_counter() - start)
    else:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        class Last(torch.nn.Module):  # a 1-element output per micro-batch, so the schedule can merge them
            def __init__(self) -> None:
                super().__init__()
                self.layers = torch.nn.Sequential(*blocks[layers // 2:], head)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.layers(x).reshape(1)

        part = torch.nn.Sequential(embed, *blocks[:layers // 2]) if rank == 0 else Last()
        stage = PipelineStage(part, rank, world, torch.device("cpu"))
        schedule = Schedule1F1B(stage, n_microbatches=GBS // MBS, loss_fn=lambda out, target: out.sum())
        opt = torch.optim.Adam(part.parameters(), lr=1e-4)
        for step in range(steps + 1):
            dist.barrier()
            start = time.perf_counter()
            if rank == 0:
                schedule.step(torch.randint(0, spec.vocab_size, (GBS, SEQ)))
            else:
                schedule.step(target=torch.zeros(GBS))
            opt.step()
            opt.zero_grad(set_to_none=True)
            dist.barrier()
            if step:
                times.append(time.perf_counter() - start)
    grown = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before], dtype=torch.float64)
    dist.all_reduce(grown, op=dist.ReduceOp.MAX)
    if rank == 0:
        Path(out).write_text(f"{statistics.median(times)!r} {float(grown) / 2**30!r}")
    dist.destroy_process_group()


def measure(mode: str, layers: int, steps: int) -> tuple[float, float]:
    import torch.multiprocessing as mp

    from cost_models.profile.netprofile import _free_port

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t")
        mp.spawn(_train, args=(2, _free_port(), mode, layers, steps, out), nprocs=2, join=True)
        seconds, gib = Path(out).read_text().split()
        return float(seconds), float(gib)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--layers", type=int, default=8)
    args = parser.parse_args(argv)

    import dataclasses

    import torch

    from cost_models.profile.layerprofile import profile_layers, scaled, table
    from cost_models.profile.netprofile import fit, fragment
    from cost_models.profile.netprofile import measure as measure_network
    from cost_models.profile.tables import read_costs
    from hardware_profiles import load_hardware
    from meshcore import Runtime
    from planner import evaluate
    from planner.inputs.loaders import load_model

    torch.set_num_threads(THREADS)  # profile under the conditions of the training processes
    spec = dataclasses.replace(scaled(load_model("llama3-8b"), 0.0625), num_layers=args.layers)
    with tempfile.TemporaryDirectory() as tmp:
        costs, net = Path(tmp) / "costs.csv", Path(tmp) / "net.yaml"
        costs.write_text(table(spec, profile_layers(spec, [1], [MBS], SEQ, "cpu", 5), "cpu"))
        samples = measure_network("gloo", 2, 3)
        net.write_text(fragment(fit(samples, 2), samples, "gloo", 2))
        model, measured = read_costs(costs)
        cluster = load_hardware(f"h100-sxm,{net}", 2)
        cluster = dataclasses.replace(cluster, gpus_per_node=2, scale_up_size=2,
                                      gpu=dataclasses.replace(cluster.gpu, memory_gib=64.0, hbm_gbs=CPU_MEMORY_GBS))
    runtime = Runtime(measured=measured, overlap_grad_reduce=False, overlap_param_gather=False)
    from machine import machine_line

    print(machine_line())
    print(f"{'layout':10} {'predicted s':>11} {'measured s':>10} {'error':>7} {'predicted GiB':>13} "
          f"{'RSS growth GiB':>14}")
    for mode, knobs in (("dp", {"tp": 1, "pp": 1, "mbs": MBS}), ("pp", {"tp": 1, "pp": 2, "mbs": MBS})):
        pred = evaluate(model, cluster, gpus=2, seq_len=SEQ, global_batch=GBS, runtime=runtime, **knobs)
        got, grown = measure(mode, args.layers, args.steps)
        error = 100 * (pred.step_time_s / got - 1)
        tensors = pred.peak_memory_gib - max(s.buffers_gib for s in pred.stages)  # no GPU buffer allowance
        print(f"{mode.upper() + '=2':10} {pred.step_time_s:11.4f} {got:10.4f} {error:+6.1f}% {tensors:13.3f} "
              f"{grown:14.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
