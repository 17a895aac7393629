"""What moved between two uv.lock files: packages added, removed, and each version change.

python scripts/dev/lock_diff.py OLD_LOCK NEW_LOCK      (``make lock`` runs it after ``uv lock --upgrade``)
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path


def locked_versions(path: Path) -> dict[str, str]:
    """Package name -> version pinned by the lock file at ``path`` (the project itself left out)."""
    packages = tomllib.loads(path.read_text())["package"]
    return {
        p["name"]: p["version"]
        for p in packages
        if "version" in p and p.get("source", {}).get("editable") is None
    }


def changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    lines = [f"+ {name} {new[name]}" for name in sorted(new.keys() - old.keys())]
    lines += [f"- {name} {old[name]}" for name in sorted(old.keys() - new.keys())]
    lines += [
        f"~ {name} {old[name]} -> {new[name]}"
        for name in sorted(old.keys() & new.keys())
        if old[name] != new[name]
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    args = parser.parse_args(argv)
    moved = changes(locked_versions(args.old), locked_versions(args.new))
    print("\n".join(moved) if moved else "uv.lock: no version changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
