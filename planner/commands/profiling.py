"""`meshplan profile layers`, `profile network`, `profile host` and `profile mlip`: time real layers, collectives, the
host's fixed costs with PyTorch (the [profile] extra) or a MACE interatomic potential (the [mlip] extra) and write a
cost table or a hardware-profile fragment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from meshcore.checks import (
    MAX_SEQ_LEN,
)
from meshcore.errors import InputError
from planner.commands.common import Model, Progress, check, int_list, needs, output_path, profile_app, run


@profile_app.command("layers")
def profile_layers(
    model: Model,
    out: Annotated[Path, typer.Option(parser=output_path, help="Cost table to write (.csv).")],
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    tp: Annotated[str, typer.Option(help="TP degrees to measure, comma-separated.")] = "1",
    mbs: Annotated[str, typer.Option(help="Micro-batch sizes to measure, comma-separated.")] = "1",
    seq_len: Annotated[int, typer.Option(min=1, help="Sequence length in tokens.")] = 2048,
    scale: Annotated[float, typer.Option(help="Scale heads, FFN and vocabulary down (a CPU cannot hold 8B).")] = 1.0,
    repeats: Annotated[int, typer.Option(min=1, max=1000, help="Timed repeats (after two warm-ups), 1 to 1000; the "
                                                                "median is kept.")] = 5,
) -> None:
    """Time real decoder, embedding and LM-head layers with PyTorch and write a cost table."""
    from meshcore.fileio import write_text_atomic
    from planner.inputs.loaders import load_model

    def action() -> None:
        if device not in ("cpu", "cuda"):
            raise InputError(f"--device must be cpu or cuda, got {device!r}")
        check({"--seq-len": (seq_len, 1, MAX_SEQ_LEN)})
        needs("torch", "profile", "profiling")
        from cost_models.profile.layerprofile import decoder_module, scaled, shard, table
        from cost_models.profile.layerprofile import profile_layers as measure
        spec, tps = scaled(load_model(model), scale), int_list(tp, "--tp")
        with Progress("timing layers") as bar:
            rows = measure(spec, tps, int_list(mbs, "--mbs"), seq_len, device, repeats, bar.update)
        built_with = decoder_module(shard(spec, tps[0]))[1]
        write_text_atomic(out, table(spec, rows, f"{device} ({built_with})"))
        for r in rows:
            typer.echo(f"{r.kind:9} tp {r.tp} mbs {r.mbs}: forward {r.forward_ms:8.3f} ms  "
                       f"backward {r.backward_ms:8.3f} ms  activations {r.activation_bytes / 2**20:8.2f} MiB")
        typer.echo(f"cost table written to {out} ({spec.name})")

    run(action)


@profile_app.command("network")
def profile_network(
    out: Annotated[Path, typer.Option(parser=output_path,
                                      help="Hardware-profile fragment to write (merge: --hardware PRESET,FILE).")],
    backend: Annotated[str, typer.Option(help="torch.distributed backend: nccl (GPUs) or gloo (CPU).")] = "gloo",
    procs: Annotated[int, typer.Option(min=2, help="Processes to spawn (one per GPU with nccl).")] = 2,
    repeats: Annotated[int, typer.Option(min=1, max=1000, help="Timed repeats per size (after three warm-ups), 1 to "
                                                                "1000.")] = 5,
) -> None:
    """Time all-reduce, all-gather, reduce-scatter, all-to-all and send/recv; fit alpha-beta."""
    from meshcore.fileio import write_text_atomic

    def action() -> None:
        if backend not in ("gloo", "nccl"):
            raise InputError(f"--backend must be gloo or nccl, got {backend!r}")
        needs("torch", "profile", "profiling")
        from cost_models.profile.netprofile import fit, fragment, measure

        with Progress("timing collectives") as bar:
            samples = measure(backend, procs, repeats, bar.update)
        fits = fit(samples, procs)
        write_text_atomic(out, fragment(fits, samples, backend, procs))
        for f in fits:
            typer.echo(f"{f.collective.value:15} alpha {f.alpha_s * 1e6:9.1f} us  "
                       f"busbw {f.busbw_bytes_per_s / 1e9:8.3f} GB/s")
        typer.echo(f"fragment written to {out}")

    run(action)


@profile_app.command("host")
def profile_host(
    out: Annotated[Path, typer.Option(parser=output_path,
                                      help="Hardware-profile fragment to write (merge: --hardware PRESET,FILE).")],
    model: Model = "llama3-8b",
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    repeats: Annotated[int, typer.Option(min=1, max=1000, help="Timed repeats (after two warm-ups), 1 to 1000; the "
                                                                "least is kept.")] = 5,
) -> None:
    """Measure the host's fixed costs: operators per layer pass and time per operator, a collective call, a host sync,
    an optimizer step."""
    from meshcore.fileio import write_text_atomic
    from planner.inputs.loaders import load_model

    def action() -> None:
        if device not in ("cpu", "cuda"):
            raise InputError(f"--device must be cpu or cuda, got {device!r}")
        needs("torch", "profile", "profiling")
        from cost_models.profile.hostprofile import fragment, measure

        spec = load_model(model)
        with Progress("timing the host") as bar:
            result = measure(spec, device, repeats)
            bar.update(1, 1)
        write_text_atomic(out, fragment(result, spec.name))
        typer.echo(f"operators per forward {result.forward_ops}, per backward {result.backward_ops} (aten); "
                   f"{result.aten_us:.2f} us each; host_op_us {result.op_us:.2f} us (per operator as "
                   "cost_models/compute/host.py counts them)")
        typer.echo(f"collective call {result.collective_us:.1f} us, host sync {result.sync_us:.1f} us, "
                   f"optimizer step {result.step_ms:.3f} ms")
        typer.echo(f"fragment written to {out}")

    run(action)


@profile_app.command("mlip")
def profile_mlip(
    out: Annotated[Path, typer.Option(parser=output_path, help="MLIP cost table to write (.csv, for meshplan mlip "
                                                                "plan --costs).")],
    mode: Annotated[str, typer.Option(help="train (forward, forces, backward) or md (forward and forces).")] = "train",
    element: Annotated[str, typer.Option(help="Element of the periodic bulk crystal (ASE's lattice).")] = "Cu",
    cells: Annotated[str, typer.Option(help="Boxes to time: the cubic cell repeated n x n x n, comma-separated n "
                                            "(fcc: 4 n^3 atoms).")] = "2,3,4,5",
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    channels: Annotated[int, typer.Option(min=1, max=512, help="MACE hidden channels.")] = 32,
    hidden_l: Annotated[int, typer.Option(min=0, max=3, help="Highest rotation order of the hidden features.")] = 1,
    layers: Annotated[int, typer.Option(min=1, max=8, help="Message-passing layers (interactions).")] = 2,
    cutoff: Annotated[float, typer.Option(min=1.0, max=15.0, help="Radial cutoff, Å.")] = 5.0,
    max_ell: Annotated[int, typer.Option(min=1, max=4, help="Edge spherical harmonics up to this order.")] = 2,
    correlation: Annotated[int, typer.Option(min=1, max=4, help="Body order of the product basis.")] = 3,
    dtype: Annotated[str, typer.Option(help="float32 or float64.")] = "float32",
    threads: Annotated[int, typer.Option(min=0, max=1024, help="CPU threads for PyTorch; 0: its default.")] = 0,
    repeats: Annotated[int, typer.Option(min=1, max=1000, help="Timed repeats per box (after two warm-ups), 1 to "
                                                                "1000; the least is kept.")] = 3,
) -> None:
    """Time a real MACE model (mace-torch) on periodic bulk boxes and write an MLIP cost table."""
    from meshcore.fileio import write_text_atomic

    def action() -> None:
        for flag, value, allowed in (("--mode", mode, ("train", "md")), ("--device", device, ("cpu", "cuda")),
                                     ("--dtype", dtype, ("float32", "float64"))):
            if value not in allowed:
                raise InputError(f"{flag} must be {' or '.join(allowed)}, got {value!r}")
        boxes = int_list(cells, "--cells")
        check({"--cells": (max(boxes), 1, 40)})
        needs("torch", "profile", "profiling")
        needs("mace", "mlip", "profile mlip")
        from cost_models.profile.mlipprofile import MaceFloat, MaceSize, machine, profile_mace
        from planner.workloads.mlip.inputs import cost_table_text
        from planner.workloads.mlip.profiled import profiled_table
        from planner.workloads.mlip.spec import MlipMode

        size = MaceSize(channels, hidden_l, layers, cutoff, max_ell, correlation, MaceFloat(dtype))
        ran_on = machine(device, threads)
        with Progress("timing MACE") as bar:
            profile = profile_mace(size, element, boxes, mode == "train", device, repeats, threads, bar.update)
        table = profiled_table(profile, size, element, MlipMode(mode), ran_on, repeats)
        command = (f"meshplan profile mlip --mode {mode} --element {element} --cells {cells} --device {device} "
                   f"--channels {channels} --hidden-l {hidden_l} --layers {layers} --cutoff {cutoff:g} --max-ell "
                   f"{max_ell} --correlation {correlation} --dtype {dtype} --threads {threads} --repeats {repeats}")
        write_text_atomic(out, cost_table_text(table, (f"written by {command}",)))
        for r in profile.rows:
            typer.echo(f"{r.atoms:>8} atoms {r.edges:>10} edges: {r.step_s * 1e3:10.2f} ms  "
                       f"{r.memory_bytes / 2**20:10.2f} MiB")
        typer.echo(f"cost table written to {out} ({table.name}, {profile.params} parameters, on {ran_on})")

    run(action)
