"""A file of ``scripts/`` (not a package) loaded as a module, or run as a program, for the tests of
``tests/scripts/``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: str) -> ModuleType:
    """``scripts/<path>.py`` (``path`` as ``folder/name``) as the module ``name``; its folder goes on
    ``sys.path``, since scripts import the others of their folder by name, as when run."""
    script = ROOT / "scripts" / f"{path}.py"
    if str(script.parent) not in sys.path:
        sys.path.append(str(script.parent))
    spec = importlib.util.spec_from_file_location(script.stem, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def run_script(path: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python scripts/<path>.py ARGS`` (``path`` as ``folder/name``) from the repository root, its output
    captured as text."""
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / f"{path}.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )
