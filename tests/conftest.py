"""Shared fixtures: the repository root on sys.path and the calibration data beside it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def calibration_dir() -> Path:
    path = SHARED / "calibration"
    if not path.is_dir():
        pytest.skip(f"calibration data not found at {path} (it lives in ../shared beside the checkout)")
    return path
