"""A pipeline schedule lives in one place: its traits in meshcore/schedules.py (`SCHEDULES`) and its pricing in
cost_models/pipeline/registry.py (`PRICING`), beside its member of `Schedule`. No other module names a member."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cost_models.pipeline.registry import PRICING
from meshcore import SCHEDULES, Layout, Schedule, ScheduleFamily, spec_of
from meshcore.errors import LayoutError
from planner.inputs.runtimes import load_runtime
from planner.search.space import SearchSpec, schedules_for

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("meshcore", "cost_models", "hardware_profiles", "planner", "meshplan")
# The modules that may name a schedule, each with its reason
REGISTRY = {
    "meshcore/enums.py": "defines the members",
    "meshcore/schedules.py": "the table of traits",
    "cost_models/pipeline/registry.py": "the table of pricing functions",
}
MEMBER = re.compile(r"\bSchedule\.([A-Z][A-Z0-9_]*)\b")
VALUE = re.compile("|".join(rf"[\"']{re.escape(s.value)}[\"']" for s in Schedule))


def _sources() -> list[Path]:
    return [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")] + [ROOT / "cli.py"]


def test_every_schedule_has_its_traits_and_its_pricing() -> None:
    assert list(SCHEDULES) == list(Schedule)
    assert set(PRICING) == set(Schedule)
    assert all(spec.schedule is s for s, spec in SCHEDULES.items())


def test_no_module_outside_the_registry_names_a_schedule() -> None:
    """No `Schedule.MEMBER` and no member's name as a string outside REGISTRY: the other modules read traits."""
    named = {str(p.relative_to(ROOT)): sorted(set(MEMBER.findall(text)) | set(VALUE.findall(text)))
             for p in _sources() if str(p.relative_to(ROOT)) not in REGISTRY
             and (MEMBER.search(text := p.read_text()) or VALUE.search(text))}
    assert named == {}
    assert all((ROOT / path).exists() for path in REGISTRY)


def test_the_check_finds_a_named_member() -> None:
    """The pattern the check above uses catches both spellings (so an empty result means something)."""
    assert MEMBER.findall("if lay.schedule is Schedule.ZB_V:") == ["ZB_V"]
    assert VALUE.search("schedule == 'zb-v'") and VALUE.search('Schedule("dualpipe-v")')


def test_the_research_runtime_runs_every_schedule() -> None:
    """`any` reads `schedules: all`: a new member is in the research space without touching its profile."""
    assert load_runtime("any").capabilities.schedules == tuple(Schedule)


@pytest.mark.parametrize("schedule", list(Schedule))
def test_search_and_layout_agree(schedule: Schedule) -> None:
    """Where the search offers a pinned schedule on (pp, vpp, m), the layout accepts it, and where the layout refuses
    it (pp > 1), the search does not offer it: both read the schedule's `ScheduleSpec`."""
    spec = SearchSpec(schedule=schedule)
    for pp in (2, 3, 4):
        for vpp in (1, 2, 3, 4):
            for m in (1, 3, 4, 5, 6, 8, 12):
                offered = schedule in schedules_for(pp, vpp, spec, m)
                try:
                    Layout(pp=pp, vpp=vpp, schedule=schedule).pipeline.validate(m, 64)
                    valid = True
                except LayoutError:
                    valid = False
                assert offered == valid, (schedule, pp, vpp, m)


def test_families() -> None:
    """The traits the schedules' papers state: ZB-V, DualPipeV, V-Half and V-Min a V of two chunks with the backward
    split; ZB-H2 and ZB-V from 2p − 1 micro-batches, DualPipeV and the wave from 2p (Qi et al. 2024; DeepSeek's
    DualPipe repository; meshplan's wave)."""
    assert {s for s in Schedule if spec_of(s).family is ScheduleFamily.V} == {
        Schedule.ZB_V, Schedule.DUALPIPE_V, Schedule.V_HALF, Schedule.V_MIN}
    assert [spec_of(s).least(4) for s in (Schedule.ZB_H2, Schedule.ZB_V, Schedule.DUALPIPE_V, Schedule.WAVE)] == [
        7, 7, 8, 8]
