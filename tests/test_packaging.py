"""What the distribution installs (issue 31 item 9): the packages meshcore, planner, cost_models, hardware_profiles and
meshplan, and no top-level module named `cli` (cli.py is the checkout's shim; the console script runs
planner.cli:main); `import meshplan` gives the planner's API."""

from __future__ import annotations

from pathlib import Path

import pytest

import planner

ROOT = Path(__file__).resolve().parents[1]


def test_import_meshplan_is_the_planner_api() -> None:
    import meshplan

    assert meshplan.plan is planner.plan and meshplan.load_plan is planner.load_plan
    assert meshplan.__all__ == planner.__all__ and "plan" in dir(meshplan)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = meshplan.nothing


def test_nothing_generic_is_installed_unprefixed() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    from setuptools import find_packages

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"meshplan": "planner.cli:main"}
    setuptools = project["tool"]["setuptools"]
    assert "py-modules" not in setuptools  # the top-level cli.py stays out of site-packages
    found = find_packages(str(ROOT), include=setuptools["packages"]["find"]["include"])
    assert {name.split(".")[0] for name in found} == {"meshcore", "planner", "cost_models", "hardware_profiles",
                                                      "meshplan"}


def test_the_entry_points_are_one_command_line() -> None:
    import cli
    from planner import cli as entry

    assert cli.app is entry.app and cli.main is entry.main
    assert (ROOT / "planner" / "__main__.py").read_text().count("from planner.cli import main") == 1
