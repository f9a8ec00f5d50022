"""meshplan sweep on Ray: the rows of the local run, and one-line errors when Ray is missing, the address is
malformed or unreachable, or the cluster cannot run a point. One local Ray instance is started for the whole
module (a start costs seconds); the tests that need no running Ray run without the package too."""

from __future__ import annotations

import sys
from typing import Any

import pandas as pd
import pytest

from meshcore.errors import InputError, SpecError
from planner.studies.sweep import Job, Varied, sweep
from planner.studies.sweep_ray import MISSING_RAY, _connected, _init_args, _task_error

JOB = Job("llama3-8b", "h100-sxm", 64, 4096, 256)
VALUES = ["8", "16", "1", "32"]  # 1 GPU fits nothing: a row with a note, not an error


@pytest.fixture(scope="module")
def on_ray() -> tuple[pd.DataFrame, list[tuple[int, int]], bool]:
    """A sweep on a local Ray instance that the sweep starts and stops: its table, its progress calls and
    whether Ray was still connected after it."""
    ray = pytest.importorskip("ray")
    calls: list[tuple[int, int]] = []
    frame = sweep(JOB, Varied.GPUS, VALUES, progress=lambda done, total: calls.append((done, total)),
                  ray_address="local")
    return frame, calls, ray.is_initialized()


def test_ray_rows_equal_the_local_rows(on_ray: tuple[pd.DataFrame, list[tuple[int, int]], bool]) -> None:
    frame, _, _ = on_ray
    local = sweep(JOB, Varied.GPUS, VALUES)
    pd.testing.assert_frame_equal(frame, local)  # names a difference, if there is one
    assert frame.equals(local)
    assert list(frame["gpus"]) == [8, 16, 1, 32] and not frame["fits"][2]


def test_ray_reports_progress_and_shuts_down(on_ray: tuple[pd.DataFrame, list[tuple[int, int]], bool]) -> None:
    _, calls, still_connected = on_ray
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert not still_connected


def test_missing_ray_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    with pytest.raises(InputError) as info:
        sweep(JOB, Varied.GPUS, ["8"], ray_address="local")
    assert str(info.value) == MISSING_RAY == "--ray needs the 'ray' package: pip install 'meshplan[ray]'"


@pytest.mark.parametrize("address", ["", "nonsense", "head:port", "head:0", "ray://:10001", 6379])
def test_malformed_address_is_named(address: object) -> None:
    with pytest.raises(InputError, match=r"^--ray takes a Ray cluster's HOST:PORT, .* got "):
        sweep(JOB, Varied.GPUS, ["8"], ray_address=address)  # type: ignore[arg-type]


def test_unreachable_cluster_is_one_line() -> None:
    pytest.importorskip("ray")
    with pytest.raises(InputError, match=r"^--ray 127\.0\.0\.1:1: no Ray cluster answers there") as info:
        sweep(JOB, Varied.GPUS, ["8"], ray_address="127.0.0.1:1")  # loopback port 1: refused at once
    assert "\n" not in str(info.value)


class _FakeRay:
    """Stands in for the ray module in _connected: records init and shutdown."""

    __version__ = "0"

    def __init__(self, connected: bool, refuse: bool = False) -> None:
        self.connected, self.refuse = connected, refuse
        self.calls: list[str] = []

    def is_initialized(self) -> bool:
        return self.connected

    def init(self, **kwargs: Any) -> None:
        self.calls.append(f"init {kwargs['address']}")
        if self.refuse:
            raise ConnectionError("Failed to connect to Ray cluster at head:6379\nmore detail")

    def shutdown(self) -> None:
        self.calls.append("shutdown")


def test_an_existing_connection_is_used_and_left_open() -> None:
    """The caller's own ray.init wins over the address: no probe of it (nothing listens there), no init, no
    shutdown."""
    fake = _FakeRay(connected=True)
    with _connected(fake, "127.0.0.1:1", ("127.0.0.1", 1), 4):  # type: ignore[arg-type]
        pass
    assert fake.calls == []


def test_a_new_connection_is_shut_down_after_errors_too() -> None:
    fake = _FakeRay(connected=False)
    with pytest.raises(RuntimeError), _connected(fake, "auto", None, 4):  # type: ignore[arg-type]
        raise RuntimeError("a point failed")
    assert fake.calls == ["init auto", "shutdown"]


def test_a_refused_connection_is_one_line() -> None:
    fake = _FakeRay(connected=False, refuse=True)
    with pytest.raises(InputError, match=r"^--ray head:6379: could not connect to Ray \(Failed to connect") as info, \
            _connected(fake, "head:6379", None, 4):  # type: ignore[arg-type]
        pass
    assert "\n" not in str(info.value)


def test_a_local_instance_is_small_and_a_cluster_gets_no_resource_arguments() -> None:
    local = _init_args("local", 3)
    assert local["include_dashboard"] is False and local["log_to_driver"] is False
    assert 1 <= local["num_cpus"] <= 3
    assert "num_cpus" not in _init_args("head:6379", 3) and "include_dashboard" not in _init_args("auto", 3)


def test_task_errors() -> None:
    """A point's meshplan error is raised as itself; a node without meshplan or a lost worker is one line."""
    exceptions = pytest.importorskip("ray.exceptions")
    spec = SpecError("unknown hardware 'x'")
    assert _task_error(exceptions.RayTaskError("_point", "tb", spec), "auto") is spec
    missing = exceptions.RaySystemError("No module named 'numpy'", "traceback: ...")
    error = _task_error(exceptions.RayTaskError("_point", "tb", missing), "auto")
    assert isinstance(error, InputError) and "could not load meshplan (System error: No module named" in str(error)
    lost = _task_error(exceptions.WorkerCrashedError(), "auto")
    assert isinstance(lost, InputError) and str(lost).startswith("--ray auto: the cluster failed to run a sweep point")
    assert "\n" not in str(error) + str(lost)
    bug = exceptions.RayTaskError("_point", "tb", KeyError("x"))
    assert _task_error(bug, "auto") is bug


def test_cli_sweep_on_ray_without_ray_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cli import app

    monkeypatch.setitem(sys.modules, "ray", None)
    args = ["sweep", "--model", "llama3-8b", "--hardware", "h100-sxm", "--seq-len", "4096", "--global-batch", "256"]
    result = CliRunner().invoke(app, [*args, "--gpus", "8", "--vary", "gpus", "--values", "8,16", "--ray", "local"])
    assert result.exit_code == 2 and result.output.strip() == f"error: {MISSING_RAY}"
    capacity = CliRunner().invoke(app, [*args, "--tokens", "1e12", "--days", "30", "--ray", "local"])
    assert capacity.exit_code == 2 and "--ray runs --vary sweeps" in capacity.output
