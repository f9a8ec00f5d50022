"""Shared fixtures: the repository root on sys.path and the calibration data shipped in benchmarks/data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
CALIBRATION = ROOT / "benchmarks" / "data" / "calibration"


@pytest.fixture(scope="session")
def calibration_dir() -> Path:
    """The published measured runs the accuracy tests use; they ship with the repository, so a missing
    folder is a broken checkout and fails the tests rather than skipping them."""
    assert CALIBRATION.is_dir(), f"calibration data missing at {CALIBRATION}: the checkout is incomplete"
    return CALIBRATION
