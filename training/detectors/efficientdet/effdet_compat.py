"""The one place this project imports the ``effdet`` package (pinned: effdet 0.4.1, timm 1.0.31, torch 2.14).

effdet supplies EfficientDet's network, anchors, anchor labeller, loss and post-processing; timm supplies
its EfficientNet backbone. Where effdet does not work as-is with current torch / timm, the fix lives here
(or in the module named below), never in a copy of effdet:

- effdet compiles functions with ``torch.jit.script`` when its modules are imported (the matcher, the
  loss, the per-image detection step). torch 2.14 deprecates ``torch.jit.script`` with a FutureWarning on
  every call, which a warnings-as-errors setting (this project's tests) turns into an ImportError.
  The import below silences exactly that warning, for exactly these imports.
- ``EfficientDet(config)`` defaults to ``pretrained_backbone=True``, which downloads ImageNet weights at
  construction. Nothing may download at run time: ``training.detectors.efficientdet.model`` always passes
  ``False`` and loads a user's weights file instead.
- ``_post_process`` / ``_batch_detection`` (the body of effdet's ``DetBenchPredict``) are private names
  of ``effdet.bench``; they are re-exported here so the pinned version is the only coupling point.

Importing effdet (and timm) costs ~1.5 s, so the rest of the project imports this module lazily: only
code that builds, trains or exports an EfficientDet pays for it.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
    from effdet import EfficientDet, get_efficientdet_config
    from effdet.anchors import AnchorLabeler, Anchors
    from effdet.bench import _batch_detection as batch_detection
    from effdet.bench import _post_process as post_process_topk
    from effdet.config import set_config_readonly, set_config_writeable
    from effdet.efficientdet import FpnCombine
    from effdet.loss import DetectionLoss

__all__ = [
    "AnchorLabeler",
    "Anchors",
    "DetectionLoss",
    "EfficientDet",
    "FpnCombine",
    "batch_detection",
    "get_efficientdet_config",
    "post_process_topk",
    "set_config_readonly",
    "set_config_writeable",
]
