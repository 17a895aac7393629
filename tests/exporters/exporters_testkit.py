"""What the exporters tests share about exported artifacts (imported as ``exporters_testkit``); the
fabricated checkpoints they export come from ``detectors_testkit``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contract.manifest import Manifest


@dataclass(frozen=True)
class ExportedArtifact:
    checkpoint: Path
    directory: Path
    manifest: Manifest

    @property
    def model_path(self) -> Path:
        return self.directory / self.manifest.file


def copy_artifact(artifact: ExportedArtifact, destination: Path) -> Path:
    """A private copy of an artifact folder (tests that write manifests must not touch the shared one)."""
    import shutil

    target = destination / "models" / artifact.manifest.name / artifact.manifest.version
    shutil.copytree(artifact.directory, target)
    return target
