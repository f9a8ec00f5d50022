"""`meshplan profile layers`, `profile network` and `profile host`: time real layers, collectives and the host's fixed
costs with PyTorch (the [profile] extra) and write a cost table or a hardware-profile fragment."""

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
