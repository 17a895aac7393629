"""A file of ``scripts/`` (not a package) loaded as a module, or run as a program, for the tests of
``tests/scripts/``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as the module ``name`` (scripts import one another by name, as when run)."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.append(str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def run_script(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python scripts/<name>.py ARGS`` from the repository root, its output captured as text."""
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )
