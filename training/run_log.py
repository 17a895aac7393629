"""The run's logs and its loss-curve plot.

``metrics.jsonl`` holds every event as one JSON line; ``train.log`` holds the same progress as text
plus what is too long for the terminal (pycocotools' full 12-line table per evaluation). The terminal
gets one line per event, written above the epoch's progress bar (``tqdm.write``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def describe(record: dict[str, Any]) -> str | None:
    """The one terminal line for an event record (None: the event is not shown)."""
    event = record.get("event")
    if event == "train":
        return (
            f"epoch {record['epoch']} iter {record['iteration']}: loss {record['loss']:.4f} "
            f"lr {record['lr']:.5f} {record['images_per_s']:.1f} img/s"
        )
    if event == "epoch":
        return (
            f"epoch {record['epoch']} done: iteration {record['iteration']}, {record['seconds']:.0f} s, "
            f"{record['images_per_s']:.1f} img/s"
        )
    if event == "eval":
        line = (
            f"eval epoch {record['epoch']} iter {record['iteration']}: AP {record['AP']:.4f} "
            f"AP50 {record['AP50']:.4f} AP75 {record['AP75']:.4f} AR100 {record['AR100']:.4f}"
        )
        if "segm_AP" in record:
            line += f"; mask AP {record['segm_AP']:.4f}"
        return line
    return None


class RunLog:
    def __init__(self, output_dir: Path, enabled: bool = True) -> None:
        self.path = output_dir / "metrics.jsonl"
        self.text_path = output_dir / "train.log"
        self.plot_path = output_dir / "loss.png"
        self.enabled = enabled

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"time": round(time.time(), 3), **record}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        line = describe(record)
        if line is not None:
            self.echo(line)

    def echo(self, line: str) -> None:
        """One line to the terminal (above the progress bar) and to ``train.log``."""
        if not self.enabled:
            return
        from tqdm import tqdm

        tqdm.write(line)
        self.note(line)

    def note(self, text: str) -> None:
        """Text for ``train.log`` only."""
        if not self.enabled:
            return
        with self.text_path.open("a") as f:
            f.write(text if text.endswith("\n") else text + "\n")

    def records(self, event: str) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        rows = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        return [r for r in rows if r.get("event") == event]

    def plot(self) -> Path | None:
        """Loss vs iteration (and AP vs iteration when evaluated) as a PNG."""
        if not self.enabled:
            return None
        train = self.records("train")
        if not train:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(
            [r["iteration"] for r in train],
            [r["loss"] for r in train],
            marker="o" if len(train) < 10 else None,  # a short run's few points stay visible
            label="train loss",
        )
        ax.set_xlabel("iteration")
        ax.set_ylabel("loss")
        ax.grid(alpha=0.3)
        evals = self.records("eval")
        if evals:
            ap_ax = ax.twinx()
            ap_ax.plot(
                [r["iteration"] for r in evals], [r["AP"] for r in evals], "o-", color="C1", label="AP"
            )
            ap_ax.set_ylabel("COCO AP")
            ap_ax.legend(loc="upper center")
        ax.legend(loc="upper right")
        fig.tight_layout()
        fig.savefig(self.plot_path, dpi=100)
        plt.close(fig)
        return self.plot_path
