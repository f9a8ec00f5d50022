"""The public API is typed at its boundary (issue 28 item 2): `import planner` stays lazy at run time, but type
checkers see the real functions and classes, so a wrong call is an error before it runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import planner

ROOT = Path(__file__).resolve().parents[1]


def test_type_checking_imports_are_the_lazy_exports() -> None:
    """Every name `planner.X` resolves at run time is imported for type checkers, and no other."""
    tree = ast.parse((ROOT / "planner" / "__init__.py").read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    typed = {(n.module, a.name) for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert typed == {(module, name) for name, module in planner._WHERE.items()}
    assert planner.__all__ == sorted(planner._WHERE)
    assert all(getattr(planner, name) is not None for name in planner.__all__)


def test_mypy_refuses_a_wrong_call(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy not installed (pip install -e '.[dev]')")
    good = tmp_path / "good.py"
    good.write_text('import planner\n\np: planner.Plan = planner.plan("llama3-8b", "h100-sxm", gpus=8, seq_len=4096, '
                    'global_batch=64)\nt: float = p.best.prediction.step_time_s\n')
    bad = tmp_path / "bad.py"
    bad.write_text('import planner\n\nplanner.plan(1, 2, gpus="x", seq_len=4096, global_batch=64)\n')
    flags = ["--no-incremental", "--cache-dir", str(tmp_path / "cache"), "--follow-imports", "silent",
             "--ignore-missing-imports"]
    out, _, status = api.run([*flags, str(good)])
    assert status == 0, out
    out, _, status = api.run([*flags, str(bad)])
    assert status == 1 and "arg-type" in out and 'gpus' in out, out
