"""Packed sequences (cost_models/compute/packing.py): documents packed into one sequence attend within themselves, as
Megatron-core's PackedSeqParams / Transformer Engine's THD and FlashAttention's varlen kernels (cu_seqlens) compute
them; the job field, the CLI flag and the plan file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from cost_models.compute.flops import attended_fraction
from cost_models.compute.knobs import LayerKnobs
from cost_models.compute.layer import _attention_core, decoder_layer_time
from cost_models.compute.packing import documents, packed_attended_fraction, packed_key_len
from hardware_profiles import load_hardware
from meshcore import JobSpec, Recompute
from meshcore.errors import InputError, SpecError
from planner.api import doc_lengths, resolve
from planner.inputs.loaders import load_model
from planner.outputs.planread import load_plan


def test_documents_fill_the_sequence_in_order_and_cut_the_last() -> None:
    assert documents(4096, ()) == [4096]
    assert documents(4096, (1000,)) == [1000, 1000, 1000, 1000, 96]
    assert documents(4096, (3000, 500)) == [3000, 500, 596]
    assert sum(documents(8192, (300, 900, 2000))) == 8192


def test_one_document_is_the_unpacked_sequence() -> None:
    """A single document of the whole sequence: the causal half (flops.attended_fraction) at key length s."""
    llama = load_model("llama3-8b")
    windowed = replace(llama, sliding_window=4096, global_attention_every=2)  # Gemma 2's pattern
    for model in (llama, windowed):
        assert packed_attended_fraction(model, 8192, (8192,)) == pytest.approx(attended_fraction(model, 8192, True))
    # documents shorter than the window are not cut by it
    assert packed_attended_fraction(windowed, 8192, (1024,)) == pytest.approx(
        packed_attended_fraction(llama, 8192, (1024,)))
    assert packed_key_len(8192, (8192,)) == 8192


def test_packed_attention_is_that_of_the_documents_alone() -> None:
    """n documents of L tokens packed in a sequence of n·L cost the attention of n sequences of L (the varlen kernel
    runs each document as its own causal problem): the attention core of one packed micro-batch equals that of a
    micro-batch of n unpacked sequences of length L, with and without context parallelism."""
    model, cluster = load_model("llama3-8b"), load_hardware("h100-sxm", 8)
    for cp in (1, 2):
        packed = JobSpec(seq_len=8192, global_batch=8, packed_doc_lens=(1024,))
        alone = JobSpec(seq_len=1024, global_batch=64)
        f_p, b_p = _attention_core(model, packed, cluster, LayerKnobs(1, cp, False, 1, Recompute.NONE))
        f_a, b_a = _attention_core(model, alone, cluster, LayerKnobs(1, 1, False, 8, Recompute.NONE))
        assert f_p * cp == pytest.approx(f_a, rel=1e-9) and b_p * cp == pytest.approx(b_a, rel=1e-9)


def test_packing_shortens_only_the_attention() -> None:
    """Short documents cut the attention's pairs by about L/s; the GEMMs and communication are those of the s tokens,
    so the layer shrinks by less, and more at long sequences."""
    model, cluster = load_model("llama3-8b"), load_hardware("h100-sxm", 8)
    knobs = LayerKnobs(1, 1, False, 1, Recompute.NONE)
    assert packed_attended_fraction(model, 8192, (512,)) == pytest.approx(0.5 * 512 / 8192, rel=0.01)
    shares = []
    for s in (4096, 16384):
        whole = decoder_layer_time(model, JobSpec(seq_len=s, global_batch=8), cluster, knobs).total
        packed = decoder_layer_time(model, JobSpec(seq_len=s, global_batch=8, packed_doc_lens=(512,)), cluster,
                                    knobs).total
        assert packed < whole
        shares.append(1 - packed / whole)
    assert shares[0] < shares[1]


def test_document_lengths_are_checked() -> None:
    assert doc_lengths("512", 4096) == (512,)
    assert doc_lengths(" 300, 900 ,2000", 4096) == (300, 900, 2000)
    assert doc_lengths("", 4096) == ()
    with pytest.raises(InputError, match="comma-separated positive integers"):
        doc_lengths("5x", 4096)
    with pytest.raises(InputError, match=r"\[1, 4096\], got 5000"):
        doc_lengths("5000", 4096)
    with pytest.raises(SpecError, match="packed document length"):
        JobSpec(seq_len=1024, global_batch=1, packed_doc_lens=(0,))
    problem = resolve("llama3-8b", "h100-sxm", gpus=8, seq_len=4096, global_batch=8, packed_doc_lens="1000")
    assert problem.job.packed_doc_lens == (1000,)
    assert replace(problem.job, packed_doc_lens=()).packed_doc_lens == ()


def test_cli_plan_writes_and_reads_the_packing(tmp_path: Path) -> None:
    out = tmp_path / "plan.yaml"
    args = ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq-len", "8192",
            "--global-batch", "16", "--packed-doc-len", "700,1500", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "packed documents of 700, 1500 tokens" in result.output
    plan = load_plan(out)
    assert plan.job.packed_doc_lens == (700, 1500)
    bad = CliRunner().invoke(app, args[:-2] + ["--packed-doc-len", "0"])
    assert bad.exit_code != 0 and "packed document length" in bad.output
