"""The self-check: a Dockerfile broken on purpose must fail the image test, at the right step, for the
right reason. Built on the same cache, so it costs one small layer and a container start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagetest.build import build
from imagetest.host import Podman
from imagetest.run import RunInputs, run_image
from imagetest.steps import StepFailed, log


@dataclass
class Breakage:
    name: str
    after: str  # the Dockerfile line (stripped) the breaking instruction goes after, in the target's stage
    instruction: str
    step: str  # the step that must fail
    reason: str  # a text the failure must contain


# A base image without the C++ runtime (as a slimmer base would be): onnxruntime cannot be imported.
MISSING_LIBSTDCXX = Breakage(
    name="missing-libstdcxx",
    after="COPY --from=serve-cpu-venv /opt/venv /opt/venv",
    instruction="RUN find /usr/lib /lib -name 'libstdc++.so.6*' -delete",
    step="probe",
    reason="libstdc++.so.6",
)


def broken_dockerfile(dockerfile: Path, breakage: Breakage, out: Path) -> Path:
    lines = dockerfile.read_text().splitlines()
    matches = [i for i, line in enumerate(lines) if line.strip() == breakage.after]
    if len(matches) != 1:
        raise StepFailed(
            "self-check", f"{dockerfile} has {len(matches)} lines `{breakage.after}`, expected 1"
        )
    lines.insert(matches[0] + 1, breakage.instruction)
    out.write_text("\n".join(lines) + "\n")
    return out


def self_check(
    podman: Podman, context: Path, dockerfile: Path, target: str, inputs: RunInputs, breakage: Breakage
) -> str:
    """Builds and runs the broken variant; returns the failure it produced (the expected one)."""
    state = inputs.scratch_root
    variant = broken_dockerfile(dockerfile, breakage, state / f"Dockerfile.{breakage.name}")
    tag = f"localhost/detect:{target}-broken-{breakage.name}"
    try:
        try:
            built = build(podman, context, variant, target, tag, state / f"build-{breakage.name}.log")
        except StepFailed as failure:
            raise StepFailed(
                "self-check", f"the {breakage.name} variant did not build: {failure.reason}"
            ) from failure
        log(
            f"self-check: the {breakage.name} image must fail at '{breakage.step}' naming {breakage.reason!r}"
        )
        try:
            run_image(podman, built.tag, inputs)
        except StepFailed as failure:
            if failure.step != breakage.step or breakage.reason not in failure.reason:
                raise StepFailed(
                    "self-check",
                    f"the {breakage.name} image failed at '{failure.step}' "
                    f"(expected '{breakage.step}' naming "
                    f"{breakage.reason!r}): {failure.reason[-800:]}",
                ) from failure
            cause = [line for line in failure.reason.splitlines() if breakage.reason in line]
            return f"'{failure.step}': {failure.reason.splitlines()[0]} ... {cause[-1].strip()}"
        raise StepFailed(
            "self-check", f"the image with {breakage.name} passed every check: the test cannot see it"
        )
    finally:
        podman.run("rmi", "--force", tag, check=False)
