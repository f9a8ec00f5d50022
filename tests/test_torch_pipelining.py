"""The op orders meshplan prices run in torch.distributed.pipelining's own runtime: each schedule's action list
(`meshplan emit --to torch-actions`) loaded into `_PipelineScheduleRuntime` on two gloo processes, the stages
placed as the list says, gives the gradients of the same model run whole in one process."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from meshcore import Schedule
from planner.outputs.emitters.actions import action_rows

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[profile]')")

WIDTH, SAMPLES_PER_MB = 8, 2


def _layers(chunks: int) -> list:
    torch.manual_seed(0)
    return [torch.nn.Linear(WIDTH, WIDTH) for _ in range(chunks)]


def _batch(m: int) -> tuple:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(m * SAMPLES_PER_MB, WIDTH, generator=gen), torch.randn(m * SAMPLES_PER_MB, WIDTH, generator=gen)


def _loss(y, target):  # noqa: ANN001, ANN202
    return ((y - target) ** 2).sum()


def _worker(rank: int, pp: int, m: int, port: int, csv: str, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _Action, _PipelineScheduleRuntime

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=pp)
    rows = Path(csv).read_text().splitlines()
    mine = sorted({_Action.from_str(cell).stage_index for cell in rows[rank].split(",")})
    chunks = 1 + max(_Action.from_str(cell).stage_index for row in rows for cell in row.split(","))
    layers = _layers(chunks)
    stages = [PipelineStage(layers[c], c, chunks, torch.device("cpu")) for c in mine]
    schedule = _PipelineScheduleRuntime(stages, n_microbatches=m, loss_fn=_loss, scale_grads=False)
    schedule._load_csv(csv)
    x, target = _batch(m)
    schedule.step(*((x,) if 0 in mine else ()), target=target if chunks - 1 in mine else None)
    torch.save({c: layers[c].weight.grad for c in mine}, f"{out}/grads{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.parametrize("schedule,pp,m,vpp", [(Schedule.WAVE, 2, 4, 2), (Schedule.WAVE, 2, 8, 4),
                                               (Schedule.ZB_V, 2, 4, 2), (Schedule.INTERLEAVED_1F1B, 2, 4, 2),
                                               (Schedule.ONE_F_ONE_B, 2, 3, 1), (Schedule.ZB_H1, 3, 6, 1),
                                               (Schedule.ZB_H2, 3, 6, 1), (Schedule.DUALPIPE_V, 2, 4, 2)])
def test_action_list_runs_in_torchs_runtime(tmp_path: Path, schedule: Schedule, pp: int, m: int, vpp: int) -> None:
    import torch.multiprocessing as mp

    csv = tmp_path / "actions.csv"
    csv.write_text(action_rows(schedule, pp, m, vpp))
    with socket.socket() as sock:  # a free port: another test run may be using any fixed one
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_worker, args=(pp, m, port, str(csv), str(tmp_path)), nprocs=pp, join=True)
    layers = _layers(pp * vpp)
    x, target = _batch(m)
    y = x
    for layer in layers:
        y = layer(y)
    _loss(y, target).backward()
    seen = {}
    for rank in range(pp):
        seen.update(torch.load(tmp_path / f"grads{rank}.pt"))
    assert sorted(seen) == list(range(pp * vpp))
    for c, grad in seen.items():
        torch.testing.assert_close(grad, layers[c].weight.grad, rtol=1e-5, atol=1e-5)
