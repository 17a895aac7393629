"""What ``detect-export``'s commands share in turning arguments into requests."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")


def request_from_args(cls: Callable[..., T], args: argparse.Namespace, **renamed: Any) -> T:
    """A command's request dataclass from the arguments of the same names, plus ``renamed`` (the
    fields whose flag is named or phrased otherwise, e.g. ``--no-verify``)."""
    names = {f.name for f in dataclasses.fields(cast(Any, cls))}
    return cls(**{name: getattr(args, name) for name in names if hasattr(args, name)}, **renamed)
