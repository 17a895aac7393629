"""A tiny real EfficientDet-D0 checkpoint for the exporters' and the service's tests.

128x128 input, 3 classes with the synthetic generator's COCO ids, random weights whose heads are
rescaled so the scores spread over (0, 1) (a freshly initialised head scores every anchor ~0.01): about
a tenth of the candidates pass 0.05, so the pre-NMS top-k, class-aware NMS and the cut at K all work.
The checkpoint carries different raw and EMA weights, so a test can tell which ones an export used.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from training.checkpoint import Checkpoint, save_checkpoint
from training.detectors.efficientdet.model import EfficientDetD0

CATEGORIES = [{"id": 2, "name": "circle"}, {"id": 5, "name": "square"}, {"id": 11, "name": "triangle"}]
MODEL_ARGS = {"num_classes": 3, "backbone": "tf_efficientnet_b0", "image_size": 128}


def _flat(maps: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([m.permute(0, 2, 3, 1).reshape(-1) for m in maps])


def calibration_images(seed: int) -> torch.Tensor:
    """The images the exporters' checks feed (a synthetic scene, noise, a gradient; generated_batches'
    defaults), letterboxed to 128 and normalized."""
    from exporters.verify import generated_batches
    from training.data.letterbox import letterbox_resize
    from training.detectors.efficientdet.transforms import EFFICIENTDET_PAD_VALUE
    from training.detectors.ssd300.transforms import normalize_to_tensor

    def resize(image: np.ndarray) -> np.ndarray:
        return letterbox_resize(image, 128, 128, EFFICIENTDET_PAD_VALUE)[0]

    return torch.stack(
        [normalize_to_tensor(image) for batch in generated_batches(resize, seed=seed) for image in batch]
    )


@torch.no_grad()
def spread_heads(model: EfficientDetD0, seed: int = 0) -> None:
    """Calibrate BatchNorm statistics on the checks' images (so activations have unit scale, as in a
    trained network, rather than the ~1e-4 of a fresh one, which FP16 could not represent faithfully),
    then rescale the prediction layers so that on the checks' images class logits ~ N(-5.5, 1.5^2) and
    box codes ~ N(0, 0.3^2): scaled by the median image, since a random network responds to each of
    these images on its own scale (one of them far more strongly than the others)."""
    images = calibration_images(seed)
    batchnorms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for bn in batchnorms:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the calibration passes
    model.train()
    model(images)
    model.eval()
    cls, box = model.class_net.predict.conv_pw, model.box_net.predict.conv_pw
    per_image = [model(image[None]) for image in images]
    cls.weight.mul_(1.5 / torch.stack([_flat(c).std() for c, _ in per_image]).median())
    box.weight.mul_(0.3 / torch.stack([_flat(b).std() for _, b in per_image]).median())
    box.bias.zero_()
    cls.bias.add_(-5.5 - torch.stack([_flat(model(image[None])[0]).mean() for image in images]).median())


def make_efficientdet_checkpoint(path: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    raw = EfficientDetD0(**MODEL_ARGS).eval()  # type: ignore[arg-type]
    spread_heads(raw, seed)
    ema = EfficientDetD0(**MODEL_ARGS).eval()  # type: ignore[arg-type]
    ema.load_state_dict(raw.state_dict())
    with torch.no_grad():  # an "average" that differs visibly but only in the prediction layers
        ema.class_net.predict.conv_pw.bias.add_(0.2)
        ema.box_net.predict.conv_pw.bias.add_(0.05)
    ckpt = Checkpoint(
        model_name="efficientdet-d0",
        model_args=dict(MODEL_ARGS),
        categories=CATEGORIES,
        model=raw.state_dict(),
        model_ema=ema.state_dict(),
        config={"note": "exporters test checkpoint", "ema_decay": 0.9998},
        epoch=2,
        iteration=10,
    )
    return save_checkpoint(ckpt, path)
