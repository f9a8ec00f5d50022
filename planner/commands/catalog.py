"""`meshplan models` and `meshplan hardware`: the built-in presets."""

from __future__ import annotations

import typer

from planner.commands.common import app


@app.command()
def models() -> None:
    """List the built-in model presets."""
    from cost_models.compute.flops import active_params, total_params
    from planner.inputs.loaders import load_model, model_preset_names

    typer.echo(f"{'preset':16} {'params':>9} {'active':>9} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>4} "
               f"{'ffn':>6} {'vocab':>7}  mlp")
    for name in model_preset_names():
        m = load_model(name)
        mlp = "gated" if m.gated_mlp else "plain"
        if m.moe is not None:
            n_dense = m.num_layers - m.moe.count_moe_layers(m.num_layers)
            mlp = f"MoE top-{m.moe.top_k} of {m.moe.num_experts}" + (f", {n_dense} dense layers" if n_dense else "")
        extras = [x for x, present in (("MLA", m.mla is not None), (f"MTP {m.mtp_layers}", m.mtp_layers > 0),
                                       ("vision encoder", m.vision is not None)) if present]
        mlp += "".join(f", {x}" for x in extras)
        typer.echo(f"{name:16} {total_params(m) / 1e9:8.2f}B {active_params(m) / 1e9:8.2f}B {m.num_layers:>6} "
                   f"{m.hidden_size:>6} {m.num_attention_heads:>5} {m.num_kv_heads:>4} {m.ffn_hidden_size:>6} "
                   f"{m.vocab_size:>7}  {mlp}")


@app.command()
def hardware() -> None:
    """List the built-in hardware presets."""
    from hardware_profiles import load_hardware, preset_names

    names = preset_names()
    width = max(12, *(len(n) for n in names))  # the longest name sets the column, so the columns stay aligned
    typer.echo(f"{'preset':{width}} {'memory':>7} {'bf16 TF':>7} {'HBM GB/s':>8} {'GPUs/node':>9} {'scale-up':>8} "
               f"{'GB/s':>5} {'NIC Gb/s':>8}")
    for name in names:
        c = load_hardware(name, 1)
        typer.echo(f"{name:{width}} {c.gpu.memory_gib:6.0f}G {c.gpu.peak_bf16_tflops:7.0f} {c.gpu.hbm_gbs:8.0f} "
                   f"{c.gpus_per_node:9} {c.scale_up_size:8} {c.scale_up.bandwidth_gbs:5.0f} "
                   f"{c.scale_out.bandwidth_gbs * 8:8.0f}")
