"""`make image-test`: build the serving image from the Dockerfile and run it as the Deployment runs it.

    .venv/bin/python scripts/deploy/image_test.py [--target serve-cpu] [--overlay k8s/overlays/cpu]
        [--no-self-check] [--keep] [--json figures.json]

Steps (a failure names one): install (podman, runc, mmdebstrap... from Debian, as root), base (the base
image: the real one when present locally, else a test-only stand-in built from Debian packages by
scripts/deploy/imagetest/standin-base.sh and tagged under the name the Dockerfile's FROM uses; never pushed),
build (``podman build --format docker --network=host --target serve-cpu`` of the unmodified Dockerfile; the
layer cache makes reruns fast), start (``podman run`` with the runtime settings of the rendered overlay's
Deployment: user and groups, read-only root, dropped capabilities, no privilege escalation, the ConfigMap's
environment, the API key file as the Secret volume would hold it, models/ as the model volume, the memory
and CPU limits), probe (startup, readiness and liveness probes as the kubelet sends them), request
(``/detect`` JSON and boxed, 401 without a key, the web page, ``/metrics``, gRPC, then concurrent load),
limit (idle and peak RSS, the memory cgroup's peak and the server's own bound under the pod's limit; no OOM
kill), drain (the preStop hook, then SIGTERM with requests in flight: all answered 200, exit code 0 within
the grace period), self-check (a Dockerfile with libstdc++ removed must fail at the probe step, naming it).

Needs root (rootful podman), kubectl (renders the overlay) and the project's venv (``make setup``).
Podman runs with a containers.conf of the test's own (CONTAINERS_CONF) in ~/.cache/detect-image-test
(IMAGE_TEST_STATE overrides); the system's configuration is left as it is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from imagetest import base, breakage, checks, host
from imagetest.build import Built, build
from imagetest.hostile import run_hostile
from imagetest.pod import pod_runtime, render
from imagetest.run import RunInputs, run_image
from imagetest.steps import StepFailed, log, step

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--context", type=Path, default=ROOT, help="build context (default: this checkout)")
    parser.add_argument("--dockerfile", type=Path, help="default: the context's Dockerfile")
    parser.add_argument("--target", default="serve-cpu")
    parser.add_argument("--tag", default="localhost/detect:serve-cpu-image-test")
    parser.add_argument("--overlay", type=Path, default=ROOT / "k8s" / "overlays" / "cpu")
    parser.add_argument("--deployment", default="detect")
    parser.add_argument("--container", default="detect")
    parser.add_argument("--models", type=Path, default=ROOT / "models", help="what the model volume holds")
    parser.add_argument("--no-self-check", action="store_true", help="skip the broken-Dockerfile self-check")
    parser.add_argument("--keep", action="store_true", help="leave the container for inspection")
    parser.add_argument(
        "--hostile",
        action="store_true",
        help="also run scripts/bench/bench_hostile.py in the container (~1.5 min)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    args.dockerfile = args.dockerfile or args.context / "Dockerfile"
    return args


def synthetic_images(state: Path, count: int = 8) -> list[bytes]:
    """Scenes like the built-in models' training data (detect-train synth, seed 0), made once."""
    folder = state / "synth"
    if len(list((folder / "val").glob("*.jpg"))) < count:
        subprocess.run(
            [str(Path(sys.executable).with_name("detect-train")), "synth", "--out", str(folder),
             "--num-train", "1", "--num-val", str(count), "--seed", "0"],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
    return checks.load_images(folder / "val", count)


def summary(built: Built, figures: checks.Figures, limit: int, total_s: float, self_check: str | None) -> str:
    idle, loaded = figures.idle, figures.loaded
    assert idle is not None and loaded is not None
    lines = [
        f"image {built.tag} ({built.image_id}): {built.size_bytes / 1e9:.2f} GB",
        f"build {built.seconds:.1f} s ({built.cached_steps} of {built.steps} steps from cache)",
        f"start to ready {figures.start_to_ready_s:.1f} s",
        f"memory limit {limit / MiB:.0f} MiB: idle RSS {idle.rss / MiB:.0f} MiB, "
        f"RSS under load up to {figures.load_rss_max / MiB:.0f} MiB, "
        f"peak RSS (VmHWM) {loaded.rss_peak / MiB:.0f} MiB, "
        f"memory cgroup peak {(loaded.cgroup_peak or 0) / MiB:.0f} MiB, "
        f"server's bound {(figures.memory_bound or 0) / MiB:.0f} MiB",
        f"drain: SIGTERM with {figures.drain_in_flight} requests in flight, answered "
        f"{', '.join(figures.drain_answered)}; exit code {figures.exit_code} "
        f"{figures.drain_exit_s:.1f} s after SIGTERM",
    ]
    if self_check is not None:
        lines.append(f"self-check: the broken image failed as it must, at {self_check}")
    lines.append(f"image-test passed in {total_s:.0f} s")
    return "\n".join(lines)


def hostile_check(hostile: dict[str, Any], limit: int) -> None:
    """The server's peak RSS in every hostile case under the pod's limit, and no OOM kill."""
    peaks = {
        case["name"]: case["rss_peak_mb"] for case in hostile["cases"] if case["rss_peak_mb"] is not None
    }
    worst = max(peaks, key=lambda name: peaks[name])
    log(f"hostile suite: server peak RSS {peaks[worst]:.0f} MiB ({worst}), limit {limit / MiB:.0f} MiB")
    if hostile["container"]["oom_killed"] or peaks[worst] * MiB >= limit:
        raise StepFailed(
            "limit",
            f"hostile suite: peak RSS {peaks[worst]:.0f} MiB in {worst} "
            f"(OOM-killed: {hostile['container']['oom_killed']}), limit {limit / MiB:.0f} MiB",
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    state = host.state_dir()
    try:
        with step("install"):
            host.install_packages()
            podman = host.Podman(host.containers_conf(state))
        with step("base"):
            log(base.ensure_base(podman, base.default_python_image(args.dockerfile)))
        with step("build"):
            built = build(podman, args.context, args.dockerfile, args.target, args.tag, state / "build.log")
            log(f"built {built.tag}: {built.size_bytes / 1e9:.2f} GB in {built.seconds:.1f} s")
        with step("start", f"settings of the Deployment in {args.overlay}, test images"):
            runtime = pod_runtime(render(args.overlay), args.deployment, args.container)
            inputs = RunInputs(runtime, args.models, synthetic_images(state), state, keep=args.keep)
        figures = run_image(podman, built.tag, inputs)
        hostile = None
        if args.hostile:
            with step("limit", "the hostile-input suite in the container"):
                hostile = run_hostile(podman, built.tag, runtime, args.models, ROOT / "scripts", state)
                table = hostile["container"]["table"].splitlines()
                print("\n".join(line for line in table if line.startswith(("| ", "|---", "**"))))
                hostile_check(hostile, runtime.memory_limit_bytes)
        self_check = None
        if not args.no_self_check:
            with step("self-check"):
                self_check = breakage.self_check(
                    podman, args.context, args.dockerfile, args.target, inputs, breakage.MISSING_LIBSTDCXX
                )
    except StepFailed as failure:
        print(f"\nimage-test FAILED at step '{failure.step}': {failure.reason}", file=sys.stderr)
        return 1
    total = time.monotonic() - started
    print(summary(built, figures, runtime.memory_limit_bytes, total, self_check))
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"build": asdict(built), "run": asdict(figures), "hostile": hostile, "total_s": total},
                indent=2,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
