"""Load one source file of an installed package with the package's other imports stubbed: how the tests read a
launcher's own argument parser (SGLang's server_args.py, xfuser's config/args.py) where the package itself needs an
accelerator or a CUDA build to import."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, files
from typing import Any

import pytest


class _Stub(types.ModuleType):
    __path__: list[str] = []
    attribute: Callable[[str], Any] = staticmethod(lambda name: None)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(self).attribute(name)


def _owned(name: str, roots: tuple[str, ...]) -> bool:
    return name.split(".")[0] in roots


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every import under `roots` becomes a stub module whose attributes are `attribute(name)`."""

    def __init__(self, roots: tuple[str, ...], attribute: Callable[[str], Any]) -> None:
        self.roots = roots
        self.stub = type("_Stub", (_Stub,), {"attribute": staticmethod(attribute)})

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if _owned(name, self.roots) else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self.stub(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def load_with_stubs(distribution: str, suffix: str, module_name: str, roots: tuple[str, ...],
                    attribute: Callable[[str], Any], install_hint: str) -> types.ModuleType:
    """The file of `distribution` whose path ends in `suffix`, executed as `module_name` while every import under
    `roots` is a stub; sys.modules is restored afterwards. Skips the test when the distribution is not installed."""
    try:
        path = next(f for f in files(distribution) or [] if str(f).endswith(suffix)).locate()
    except (PackageNotFoundError, StopIteration):
        pytest.skip(f"{distribution} is not installed ({install_hint})")
    saved = {k: v for k, v in sys.modules.items() if _owned(k, roots)}
    for key in saved:
        del sys.modules[key]
    finder = _StubFinder(roots, attribute)
    sys.meta_path.insert(0, finder)
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses look their module up while they are built
        spec.loader.exec_module(module)
    finally:
        sys.meta_path.remove(finder)
        for key in [k for k in sys.modules if _owned(k, roots) or k == module_name]:
            del sys.modules[key]
        sys.modules.update(saved)
    return module
