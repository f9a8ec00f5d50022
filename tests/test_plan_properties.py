"""Properties of plans on random models and clusters: whatever the search returns is valid, fits, is what
the cost model says of that layout, and is no slower (as a plan reports it) than the even-split version of itself."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_models.step import evaluate_layout
from planner import InfeasibleError, LayoutError, plan
from planner.inputs.loaders import model_from_mapping
from planner.search.simulate import simulated_step_time
from planner.search.space import SearchSpec


@st.composite
def problems(draw: st.DrawFn) -> dict:
    heads = draw(st.sampled_from([8, 16, 32]))
    model = model_from_mapping({
        "name": "random", "num_layers": draw(st.integers(2, 24)), "hidden_size": heads * 64,
        "ffn_hidden_size": draw(st.sampled_from([2, 3, 4])) * heads * 64, "num_attention_heads": heads,
        "num_kv_heads": draw(st.sampled_from([h for h in (1, 2, 4, 8) if heads % h == 0])),
        "vocab_size": draw(st.sampled_from([1000, 32000, 128000])), "gated_mlp": draw(st.booleans()),
        "tied_embeddings": draw(st.booleans())}, "random")
    return {"model": model, "hardware": draw(st.sampled_from(["a100-40gb", "h100-sxm", "l40s", "rtx4090"])),
            "gpus": draw(st.sampled_from([1, 2, 8, 16, 32])), "seq_len": draw(st.sampled_from([512, 2048, 8192])),
            "global_batch": draw(st.sampled_from([8, 32, 96]))}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems())
def test_plans_are_valid_and_consistent(problem: dict) -> None:
    try:
        result = plan(spec=SearchSpec(top_k=3), **problem)
    except InfeasibleError as exc:  # nothing fits in memory (exit 3)
        assert "no layout fits" in str(exc)
        return
    except LayoutError as exc:  # no layout of the job passes the rules and limits (exit 2)
        assert "no valid layout" in str(exc)
        return
    model, gpus = problem["model"], problem["gpus"]
    for ranked in (result.best, *result.alternatives):
        lay, pred = ranked.layout, ranked.prediction
        lay.validate(model, result.job, gpus)
        assert lay.tp * lay.pp * lay.dp * lay.cp == gpus
        assert sum(lay.chunk_layers(model.num_layers)) == model.num_layers
        assert pred.fits and all(s.peak_memory_gib <= pred.memory_capacity_gib for s in pred.stages)
        again = evaluate_layout(model, result.cluster, result.job, lay)
        assert again.step_time_s == pytest.approx(pred.step_time_s, rel=1e-12)
        if lay.stage_layers is not None and lay.recompute_layers is None:  # as a plan reports both: simulated or not
            even_layout = replace(lay, stage_layers=None)
            even = evaluate_layout(model, result.cluster, result.job, even_layout)
            sim = simulated_step_time(model, result.cluster, result.job, even_layout, even)
            assert not even.fits or ranked.step_time_s <= (sim if sim is not None else even.step_time_s) * (1 + 1e-9)
    assert result.certificate is not None and result.certificate.optimal
