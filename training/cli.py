"""``detect-train``: make a synthetic dataset, train a detector, evaluate a checkpoint."""

from __future__ import annotations

import argparse
import json
import sys

from training import evaluate, train


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="detect-train", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="write a synthetic COCO-format dataset")
    synth.add_argument("--out", required=True)
    synth.add_argument("--num-train", type=int, default=1000)
    synth.add_argument("--num-val", type=int, default=200)
    synth.add_argument("--seed", type=int, default=0)

    train.add_train_arguments(sub.add_parser("train", help="train a detector on COCO-format data"))
    evaluate.add_eval_arguments(sub.add_parser("eval", help="COCO metrics of a checkpoint"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "synth":
            from training.data.synthetic import generate_dataset

            summary = generate_dataset(args.out, args.num_train, args.num_val, args.seed)
            print(json.dumps(summary, indent=2, default=str))
        elif args.command == "train":
            train.main(train.config_from_args(args))
        elif args.command == "eval":
            evaluate.main(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"detect-train {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
