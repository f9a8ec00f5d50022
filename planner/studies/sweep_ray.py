"""Run a sweep's work items as Ray tasks on a Ray cluster (`sweep(..., ray_address=...)`, the `--ray` option).

One job: call a module-level function once per work item, each call a Ray remote task, and return the results
in the items' order. It knows nothing about planning: planner/studies/sweep.py hands it `_point` and the points.

The address is "local" (start a Ray instance on this machine for this sweep and stop it afterwards), "auto"
(the cluster this machine belongs to, as Ray finds it), HOST:PORT (a cluster's head, the port `ray start --head`
printed) or ray://HOST:PORT (Ray Client, which needs `pip install 'ray[client]'`). Every node of a cluster needs
meshplan and its dependencies importable by the Ray workers, the same version as here, and the same Ray and
Python versions. `ray` is imported only here and only when a sweep asks for it, so meshplan runs without it.
Every failure to import Ray, to reach the cluster or to load meshplan on its workers is a one-line InputError
(the CLI's exit 2, no traceback); a meshplan error raised by a point is re-raised as itself, as a local run
would raise it.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from types import ModuleType
from typing import Any, TypeVar

from meshcore.errors import InputError, MeshplanError

R = TypeVar("R")

LOCAL = "local"  # start a Ray instance on this machine for the sweep
AUTO = "auto"  # Ray's own lookup of a running cluster (RAY_ADDRESS, or the one `ray start` left on this machine)
CLIENT_SCHEME = "ray://"
PROBE_TIMEOUT_S = 5.0  # Ray itself retries an unreachable head for minutes; a TCP connect answers in seconds
MISSING_RAY = "--ray needs the 'ray' package: pip install 'meshplan[ray]'"


def run_on_ray(address: str, func: Callable[..., R], items: Sequence[tuple[Any, ...]],
               progress: Callable[[int, int], None] | None = None) -> list[R]:
    """`[func(*item) for item in items]`, each call a Ray task on the cluster at `address`, in the items'
    order. `func` must be a module-level function (the workers import it by name). `progress(done, total)` is
    called as tasks finish. A connection this process already has (`ray.init` called by the caller) is used
    as it is, whatever `address` says, and left open; otherwise this call connects (or starts a local
    instance) and shuts Ray down before returning, also on errors."""
    head = _parse_address(address)
    ray = _import_ray()
    with _connected(ray, address, head, len(items)):
        return _gather(ray, address, func, items, progress)


def _parse_address(address: object) -> tuple[str, int] | None:
    """(host, port) of a HOST:PORT or ray://HOST:PORT address, None for "local" and "auto"; anything else is
    an InputError naming the forms allowed (checked before Ray is imported or started)."""
    if address in (LOCAL, AUTO):
        return None
    forms = f"a Ray cluster's HOST:PORT, {CLIENT_SCHEME}HOST:PORT, {AUTO} or {LOCAL}"
    if not isinstance(address, str):
        raise InputError(f"--ray takes {forms}, got {address!r}")
    host, _, port = address.removeprefix(CLIENT_SCHEME).rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--ray takes {forms}, got {address!r}")
    return host, int(port)


def _import_ray() -> ModuleType:
    """The ray module, or the one-line InputError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        if exc.name == "ray":
            raise InputError(MISSING_RAY) from None
        raise InputError(f"--ray: the 'ray' package is installed but does not import ({_line(exc)}); "
                         "reinstall it: pip install 'meshplan[ray]'") from None
    return ray


def _probe(address: str, host: str, port: int) -> None:
    """Fail fast when nothing listens at the head's address: ray.init would retry it for minutes."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as exc:
        raise InputError(f"--ray {address}: no Ray cluster answers there ({_line(exc) or type(exc).__name__}); "
                         "start one with `ray start --head` or give its head's address") from None


@contextmanager
def _connected(ray: ModuleType, address: str, head: tuple[str, int] | None, tasks: int) -> Iterator[None]:
    """Ray connected for the block: an existing connection as it is (and left open), else a new one, to the
    cluster's `head` (host, port) when there is one, that is shut down when the block ends. An unreachable
    head, a refused connection or a failed start is a one-line InputError."""
    if ray.is_initialized():
        yield
        return
    if head is not None:
        _probe(address, *head)
    try:
        ray.init(**_init_args(address, tasks))
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError or ValueError, by cause
        ray.shutdown()  # whatever the failed init had started or half-connected is released
        raise _refused(ray, address, exc) from None
    try:
        yield
    finally:
        ray.shutdown()


def _refused(ray: ModuleType, address: str, exc: Exception) -> InputError:
    """The one-line error for a failed ray.init, with what most often causes it."""
    if address == LOCAL:
        return InputError(f"--ray {LOCAL}: could not start a local Ray instance ({_line(exc)})")
    return InputError(f"--ray {address}: could not connect to Ray ({_line(exc)}); the cluster must run ray "
                      f"{ray.__version__} on the same Python version, and one with token authentication needs "
                      "RAY_AUTH_MODE=token here")


def _init_args(address: str, tasks: int) -> dict[str, Any]:
    """ray.init's arguments: quiet (no worker output, Ray's own log at errors only); a local instance is
    small: as many CPUs as tasks, up to this machine's cores, and no dashboard."""
    args: dict[str, Any] = {"address": address, "log_to_driver": False, "logging_level": logging.ERROR}
    if address == LOCAL:  # a cluster refuses resource arguments from a connecting driver
        args |= {"num_cpus": max(1, min(tasks, os.cpu_count() or 1)), "include_dashboard": False}
    return args


def _gather(ray: ModuleType, address: str, func: Callable[..., R], items: Sequence[tuple[Any, ...]],
            progress: Callable[[int, int], None] | None) -> list[R]:
    """Submit one task per item, collect the results as they finish, return them in the items' order."""
    refs = _submit(ray, address, func, items)
    slot = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(refs)
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                results[slot[ref]] = _result(ray, address, ref)
                if progress is not None:
                    progress(len(refs) - len(pending), len(refs))
    finally:
        for ref in pending:  # after an error or an interrupt: free the cluster of points nobody will read
            with suppress(Exception):  # the error that got us here is the one to report
                ray.cancel(ref)
    return results


def _submit(ray: ModuleType, address: str, func: Callable[..., Any], items: Sequence[tuple[Any, ...]]) -> list[Any]:
    """One task per item, their object refs in the items' order. Ray Client (ray://) loads the function on
    the cluster as it is submitted, so there a cluster without meshplan fails here, not in a task."""
    remote = ray.remote(func)
    try:
        return [remote.remote(*item) for item in items]
    except ImportError as exc:
        raise _cannot_load(address, exc) from None


def _result(ray: ModuleType, address: str, ref: Any) -> Any:
    """One task's value; its failure as the error a local run would raise, or as a one-line InputError when
    the cluster, not the point, failed."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        raise _task_error(exc, address) from None


def _task_error(exc: BaseException, address: str) -> BaseException:
    """The error to raise for a failed task. A meshplan error from the point: itself. A worker that could not
    import meshplan or one of its dependencies, Ray's own failure inside a worker, a lost worker or node: a
    one-line InputError naming the cause. Any other exception from the point: as Ray raised it (an instance
    of the point's exception class whose message carries the remote traceback: a bug to report)."""
    cause = getattr(exc, "cause", None)  # set on a task's own exception (RayTaskError), absent on Ray's
    if isinstance(cause, MeshplanError):
        return cause
    if isinstance(cause, ImportError) or "No module named" in _line(cause):
        return _cannot_load(address, cause)
    if cause is None or type(cause).__module__.startswith("ray."):
        failed = cause if cause is not None else exc
        return InputError(f"--ray {address}: the cluster failed to run a sweep point "
                          f"({type(failed).__name__}: {_line(failed)})")
    return exc


def _cannot_load(address: str, cause: BaseException | None) -> InputError:
    """The one-line error for a cluster whose workers cannot import meshplan or a dependency of it."""
    return InputError(f"--ray {address}: a Ray worker could not load meshplan ({_line(cause)}); every node needs "
                      "meshplan and its dependencies installed, the same version as here")


def _line(exc: BaseException | None) -> str:
    """The first non-empty line of an exception's message (Ray's carry tracebacks after it)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
