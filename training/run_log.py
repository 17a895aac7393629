"""The run's machine-readable log (JSON lines) and its loss-curve plot."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class RunLog:
    def __init__(self, output_dir: Path, enabled: bool = True) -> None:
        self.path = output_dir / "metrics.jsonl"
        self.plot_path = output_dir / "loss.png"
        self.enabled = enabled

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"time": round(time.time(), 3), **record}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if record.get("event") == "train":
            print(
                f"epoch {record['epoch']} iter {record['iteration']}: loss {record['loss']:.4f} "
                f"lr {record['lr']:.5f} {record['images_per_s']:.1f} img/s",
                flush=True,
            )

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
        ax.plot([r["iteration"] for r in train], [r["loss"] for r in train], label="train loss")
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
