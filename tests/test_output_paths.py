"""Outputs never destroy what their path points at (issue 37): a regular file is replaced atomically, a symbolic
link's target is replaced and the link kept, a device, FIFO or socket is written to directly, `-` is standard
output, and an empty path or a folder is a one-line error."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from meshcore.errors import InputError
from meshcore.fileio import write_text_atomic, writes_stdout

DATA = "schema_version: 1\n"


def test_a_regular_file_is_replaced_atomically(tmp_path: Path) -> None:
    target = tmp_path / "plan.yaml"
    target.write_text("old\n")
    write_text_atomic(target, DATA)
    assert target.read_text() == DATA and sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"]


def test_a_symlink_keeps_pointing_at_its_replaced_target(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    real = tmp_path / "configs" / "current.yaml"
    real.write_text("old\n")
    link = tmp_path / "plan.yaml"
    link.symlink_to(Path("configs") / "current.yaml")
    write_text_atomic(link, DATA)
    assert link.is_symlink() and os.readlink(link) == str(Path("configs") / "current.yaml")
    assert real.read_text() == DATA and not any(p.name.endswith(".tmp") for p in real.parent.iterdir())


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "plan.yaml"
    link.symlink_to(tmp_path / "new.yaml")
    write_text_atomic(link, DATA)
    assert link.is_symlink() and (tmp_path / "new.yaml").read_text() == DATA


def test_a_fifo_is_written_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    write_text_atomic(fifo, DATA)
    reader.join(timeout=10)
    assert received == [DATA.encode()] and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_socket_is_sent_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "sock"
    received: list[bytes] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                chunks = []
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
                received.append(b"".join(chunks))

        thread = threading.Thread(target=serve)
        thread.start()
        write_text_atomic(path, DATA)
        thread.join(timeout=10)
    assert received == [DATA.encode()] and stat.S_ISSOCK(path.lstat().st_mode)


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null")
def test_a_device_stays_a_device() -> None:
    write_text_atomic("/dev/null", DATA)
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_device_is_a_one_line_error_and_stays_a_device() -> None:
    with pytest.raises(InputError, match=r"^cannot write /dev/full: No space left on device$"):
        write_text_atomic("/dev/full", DATA)
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


@pytest.mark.parametrize("path", ["-", "/dev/stdout"])
def test_dash_and_dev_stdout_are_standard_output(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert writes_stdout(path)
    write_text_atomic(path, DATA)
    assert capsys.readouterr().out == DATA


def test_an_empty_path_or_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot write to an empty path"):
        write_text_atomic("", DATA)
    with pytest.raises(InputError, match="it is a folder"):
        write_text_atomic(tmp_path, DATA)
    assert tmp_path.is_dir()


def test_plan_out_dash_prints_the_plan_file_and_reports_on_stderr() -> None:
    res = CliRunner().invoke(app, ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8",
                                   "--seq-len", "4096", "--global-batch", "64", "--out", "-"])
    assert res.exit_code == 0
    assert res.stdout.startswith("schema_version: 1\n") and "step time" not in res.stdout
    assert "plan written to -" in res.stderr


def test_cli_refuses_an_empty_out() -> None:
    res = CliRunner().invoke(app, ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8",
                                   "--seq-len", "4096", "--global-batch", "64", "--out", ""])
    assert res.exit_code == 2 and "must name a file, or - for standard output" in res.output
    assert "Traceback" not in res.output
