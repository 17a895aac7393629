"""``detect-train``: make a synthetic dataset, train a detector, evaluate a checkpoint.

``synth`` needs only the base install (numpy, OpenCV, pycocotools), so it runs from the serving install
too (``.venv-serve/bin/detect-train synth ...``); ``train`` and ``eval`` need the ``train`` extra (torch).
"""

from __future__ import annotations

import argparse
import json
import sys

from training.arguments import add_eval_arguments, add_train_arguments


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="detect-train", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="write a synthetic COCO-format dataset (no torch needed)")
    synth.add_argument("--out", required=True)
    synth.add_argument("--num-train", type=int, default=1000)
    synth.add_argument("--num-val", type=int, default=200)
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument(
        "--scene",
        choices=["shapes", "large"],
        default="shapes",
        help="shapes: 160-480 px images (the built-in models' data); large: 2000-4000 px scenes with "
        "20-80 px shapes, for tiled inference",
    )
    synth.add_argument(
        "--video",
        action="store_true",
        help="write one video with ground-truth tracks instead (video.mp4 + MOT-style gt/gt.txt: shapes "
        "moving, entering, leaving and occluding each other)",
    )
    synth.add_argument("--frames", type=int, default=150, help="--video: number of frames")
    synth.add_argument("--fps", type=int, default=15, help="--video: frames per second")
    synth.add_argument("--size", default="384x288", help="--video: WIDTHxHEIGHT")

    add_train_arguments(sub.add_parser("train", help="train a detector on COCO-format data"))
    add_eval_arguments(sub.add_parser("eval", help="COCO metrics of a checkpoint"))
    return parser


def _run(args: argparse.Namespace) -> None:
    if args.command == "synth" and args.video:
        from training.data.synthetic_video import VideoConfig, generate_video

        width, height = (int(v) for v in args.size.lower().split("x"))
        video = VideoConfig(width=width, height=height, frames=args.frames, fps=args.fps)
        print(json.dumps(generate_video(args.out, args.seed, video), indent=2))
        return
    if args.command == "synth":
        from training.data.synthetic import generate_dataset
        from training.data.synthetic_scene import LARGE_SCENES

        config = LARGE_SCENES if args.scene == "large" else None
        summary = generate_dataset(args.out, args.num_train, args.num_val, args.seed, config)
        print(json.dumps(summary, indent=2, default=str))
        return
    try:
        import torch  # noqa: F401  (train and eval need it: say which extra, not a traceback)
    except ModuleNotFoundError as exc:
        raise SystemExit(
            f"detect-train {args.command}: error: {exc}: this needs the train extra "
            "(make setup, or pip install -e '.[train]'); only `detect-train synth` runs without it"
        ) from None
    if args.command == "train":
        from training import train
        from training.arguments import config_from_args

        train.main(config_from_args(args))
    elif args.command == "eval":
        from training import evaluate

        evaluate.main(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _run(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"detect-train {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
