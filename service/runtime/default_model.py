"""Which model answers a request that names none: declared, never guessed.

In order:

1. the setting ``DETECT_DEFAULT_MODEL``;
2. the file ``<model repository>/default``: one line, the model's name (blank lines and ``#`` comments
   are ignored), committed with the repository, so exporting another model into it changes nothing;
3. the only model, when the repository holds exactly one.

Otherwise there is no default: the server starts, says so in its log, and a request without ``model``
gets 400 naming the models to choose from. A declared name that is not in the repository stops the
start (`DefaultModelError`).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

DEFAULT_FILE = "default"


class DefaultModelError(ValueError):
    """The declared default model is missing from the repository, or the declaration is unreadable."""


def read_default_file(repository: Path) -> str | None:
    """The model name ``<repository>/default`` declares, or None when there is no such file."""
    path = repository / DEFAULT_FILE
    if not path.is_file():
        return None
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    names = [line for line in lines if line]
    if len(names) != 1:
        raise DefaultModelError(f"{path}: expected one line with a model name, found {len(names)}")
    return names[0]


def resolve_default_model(setting: str | None, repository: Path, names: Collection[str]) -> str | None:
    """The default model's name (see the module docstring), or None when nothing declares one and the
    repository holds several models."""
    available = sorted(names)
    declared, source = setting, "DETECT_DEFAULT_MODEL"
    if declared is None:
        declared, source = read_default_file(repository), str(repository / DEFAULT_FILE)
    if declared is None:
        return available[0] if len(available) == 1 else None
    if declared not in names:
        raise DefaultModelError(
            f"default model {declared!r} (from {source}) is not in the repository; it has {available}"
        )
    return declared


def no_default_message(names: Collection[str]) -> str:
    """The 400 answer for a request without ``model`` when the server declares no default."""
    return (
        f"no model named and this server declares no default; it has {sorted(names)}: pass ?model=NAME, "
        "or declare the default (DETECT_DEFAULT_MODEL, or a file 'default' in the model repository)"
    )
