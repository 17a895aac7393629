"""The augmentation's random stream, reproducible per DataLoader worker and epoch."""

from __future__ import annotations

import numpy as np
import torch


class WorkerRng:
    """``rng()`` -> a numpy Generator seeded from ``(seed, torch.initial_seed())``, re-created whenever
    ``torch.initial_seed()`` changes. Inside DataLoader workers that value is the loader's per-epoch base
    seed plus the worker id, so every worker and epoch draws a different, reproducible stream; in the main
    process the stream simply continues."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self._rng: np.random.Generator | None = None
        self._key: int | None = None

    def __call__(self) -> np.random.Generator:
        key = torch.initial_seed()
        if self._rng is None or key != self._key:
            entropy = [key] if self.seed is None else [self.seed, key]
            self._rng, self._key = np.random.default_rng(entropy), key
        return self._rng
