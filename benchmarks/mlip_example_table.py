"""Writes benchmarks/data/mlip/example-mace-formula.csv: an EXAMPLE cost table for `meshplan mlip plan`, computed
from a formula, not measured. It shows the format and gives the planner something MACE-sized to split; plan real
jobs from a profile of your model on your GPU.

The formula (a MACE-like model, L_max = 1, 128 channels, 2 layers, 6 Å cutoff, at the density of liquid water):
    edges per atom      E = ρ·4/3·π·r³ = 0.1·4/3·π·6³ ≈ 90.5
    FLOPs per atom      F = 3 (forward, forces, backward) · layers · E · f_e,  f_e = 1.6e5 per edge per layer
                          (a 128-channel tensor product with ~20 paths at 2 FLOPs per multiply-add x 16 weights
                          per path and channel, rounded; assumed)
    seconds             t(N) = t0 + N·F / R,  t0 = 5 ms (launches, neighbour list; assumed), R = 20 TFLOP/s
                          achieved on an H100 (irregular gathers and scatters in fp32; assumed)
    bytes               m(N) = N·E·layers·8 KiB (edge features kept for backward: 128 channels x 16 fp32) + 0.5 GiB
    halo bytes / atom   128 x (1 + 3) fp32 = 2048 (scalar and vector features)
    params              4.7 million (MACE-MP-0 medium's published size)

    python benchmarks/mlip_example_table.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from meshcore.fileio import write_text_atomic  # noqa: E402

OUT = Path(__file__).resolve().parent / "data" / "mlip" / "example-mace-formula.csv"
DENSITY, CUTOFF, LAYERS, F_EDGE, T0, RATE = 0.1, 6.0, 2, 1.6e5, 5e-3, 20e12


def main() -> None:
    edges = DENSITY * 4 / 3 * math.pi * CUTOFF**3
    flops = 3 * LAYERS * edges * F_EDGE
    lines = ["# name: example-mace-formula",
             "# source: EXAMPLE from the formula in benchmarks/mlip_example_table.py, not a measurement",
             "# device: H100 SXM (assumed rate)",
             f"# layers: {LAYERS}", f"# cutoff_a: {CUTOFF}", "# halo_bytes: 2048", "# params: 4700000",
             f"# density: {DENSITY}", "atoms,step_s,memory_bytes"]
    for atoms in (100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000):
        seconds = T0 + atoms * flops / RATE
        memory = atoms * edges * LAYERS * 8192 + 0.5 * 2**30
        lines.append(f"{atoms},{seconds:.6g},{memory:.6g}")
    write_text_atomic(OUT, "\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
