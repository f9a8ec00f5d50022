"""Search speed: wall time and candidate counts of `planner.plan` on the full layout space.

    python benchmarks/search_time.py [--repeat N] [--offload-auto]

Targets (2-core machine): <= 1 s up to 1024 GPUs, <= 10 s at 16384 GPUs. Each case's speed-up over the previous
release's median (benchmarks/data/search_time_previous.yaml) is printed beside it. Each case is run N times
(default 3) in this process and the median wall and CPU seconds are printed (the first run includes loading
presets); then the first case once more as a whole process (`meshplan plan`, start-up and printing included).
With --offload-auto every offload choice is searched as well (`SearchSpec.offload_auto`, `plan --offload auto`): up
to six times the candidates; the ratio is then to the previous release's medians with it (the `offload auto` section
of the data file).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

import planner  # noqa: E402
from planner.search.space import SearchSpec  # noqa: E402

# the previous release's medians: each case's ratio is printed beside it
PREVIOUS: dict[str, Any] = yaml.safe_load((Path(__file__).parent / "data" / "search_time_previous.yaml").read_text())

# (model, hardware, GPUs, sequence length, global batch in sequences)
CASES = [
    ("llama3-8b", "h100-sxm", 8, 8192, 128),
    ("llama3-8b", "h100-sxm", 64, 8192, 512),
    ("llama3-70b", "h100-sxm", 1024, 8192, 1024),
    ("gpt3-175b", "a100-80gb", 1024, 2048, 1536),
    ("llama3-405b", "h100-sxm", 16384, 8192, 2048),
    ("mixtral-8x7b", "h100-sxm", 256, 4096, 1024),
    ("llama4-maverick", "h100-sxm", 256, 8192, 512),
    ("deepseek-v3", "h800", 2048, 4096, 15360),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--offload-auto", action="store_true", help="search every offload choice as well")
    args = parser.parse_args(argv)
    spec = SearchSpec(offload_auto=True) if args.offload_auto else None
    previous = PREVIOUS.get("offload auto", {}) if args.offload_auto else PREVIOUS
    print(f"{'case':52} {'median s':>8} {'CPU s':>6} {'vs prev':>7} {'candidates':>10} {'priced':>7} "
          f"{'pruned mem':>10} {'pruned time':>11}  best")
    for model, hw, gpus, seq, batch in CASES:
        times, cpu = [], []
        for _ in range(args.repeat):
            start, start_cpu = time.perf_counter(), time.process_time()
            plan = planner.plan(model, hw, gpus=gpus, seq_len=seq, global_batch=batch, spec=spec)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        c, lay = plan.certificate, plan.best.layout
        assert c is not None
        experts = f"ep{lay.ep} etp{lay.etp} " if lay.ep > 1 or lay.etp > 1 else ""
        best = (f"tp{lay.tp} pp{lay.pp} dp{lay.dp} cp{lay.cp} {experts}vpp{lay.vpp} mbs{lay.mbs} "
                f"zero{int(lay.zero)} {lay.recompute.value} {lay.schedule.value}, "
                f"MFU {100 * plan.best.prediction.mfu:.1f} %")
        name = f"{model} on {gpus} x {hw} (s={seq}, B={batch})"
        before = previous.get(name)
        ratio = f"{before / statistics.median(times):5.1f}x" if before else "    -"
        print(f"{name:52} {statistics.median(times):8.2f} {statistics.median(cpu):6.2f} {ratio:>7} {c.candidates:10} "
              f"{c.evaluated:7} {c.pruned_memory:10} {c.pruned_time:11}  {best}")
    exe = shutil.which("meshplan")
    if exe is not None:
        model, hw, gpus, seq, batch = CASES[0]
        command = [exe, "plan", "--model", model, "--hardware", hw, "--gpus", str(gpus), "--seq-len", str(seq),
                   "--global-batch", str(batch)] + (["--offload", "auto"] if args.offload_auto else [])
        walls = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            walls.append(time.perf_counter() - start)
        whole = statistics.median(walls)
        before = previous.get("whole process")
        print(f"\nwhole process, `meshplan plan` of the first case: {whole:.2f} s median (target 0.5 s"
              + (f"; previous release {before:.2f} s, {before / whole:.1f}x" if before else "") + ")")
    else:
        print("\nwhole process: no `meshplan` on PATH (pip install -e .), not timed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
