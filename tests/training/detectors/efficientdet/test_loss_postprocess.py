"""The loss is effdet's training loss and the post-processing is effdet's DetBenchPredict, on our tensors."""

from __future__ import annotations

import pytest
import torch

from training.detectors.efficientdet.effdet_compat import batch_detection, post_process_topk
from training.detectors.efficientdet.model import EfficientDetD0, anchor_boxes
from training.detectors.efficientdet.postprocess import PostprocessConfig, detections
from training.detectors.efficientdet.task import EfficientDetTask

ARGS = {"num_classes": 3, "backbone": "efficientnet_b0", "image_size": 128}


@pytest.fixture(scope="module")
def model() -> EfficientDetD0:
    torch.manual_seed(0)
    net = EfficientDetD0(**ARGS).eval()  # type: ignore[arg-type]
    with torch.no_grad():  # spread the class scores so NMS and the top-k have real work
        net.class_net.predict.conv_pw.bias.add_(4.0)
    return net


def test_loss_is_effdets_detbenchtrain_loss(model: EfficientDetD0) -> None:
    from effdet import DetBenchTrain

    task = EfficientDetTask(dict(ARGS))
    cfg = task.config
    assert (cfg.alpha, cfg.gamma, cfg.delta, cfg.box_loss_weight) == (0.25, 1.5, 0.1, 50.0)
    images = torch.randn(2, 3, 128, 128)
    boxes = torch.tensor(
        [
            [[10.0, 20.0, 60.0, 90.0], [70.0, 5.0, 120.0, 40.0]],
            [[30.0, 30.0, 100.0, 64.0], [0.0, 0.0, 0.0, 0.0]],
        ]
    )
    labels = torch.tensor([[1, 3], [2, -1]])  # -1: padding
    criterion = task.build_criterion()
    with torch.no_grad():
        ours = criterion(*model(images), boxes, labels)
        bench = DetBenchTrain(model, create_labeler=True)
        bench.train()  # the bench's training branch (no detections) ...
        model.eval()  # ... on a deterministic network (no drop-path)
        theirs = bench(images, {"bbox": boxes[..., [1, 0, 3, 2]], "cls": labels.float()})["loss"]
    torch.testing.assert_close(ours, theirs)
    assert criterion.last["box_loss"] > 0 and criterion.last["class_loss"] > 0


def test_detections_are_effdets_detbenchpredict(model: EfficientDetD0) -> None:
    images = torch.randn(2, 3, 128, 128)
    with torch.no_grad():
        class_outputs, box_outputs = model(images)
    anchors = anchor_boxes(model)
    ours = detections(class_outputs, box_outputs, anchors, 3, 128, PostprocessConfig())
    k = min(5000, anchors.shape[0] * 3)
    cls, box, idx, classes = post_process_topk(class_outputs, box_outputs, 5, 3, max_detection_points=k)
    # effdet clips to img_size / img_scale (W, H) before NMS: here the 128 x 128 input itself
    img_scale, img_size = torch.ones(2), torch.full((2, 2), 128.0)
    theirs = batch_detection(2, cls, box, anchors, idx, classes, img_scale, img_size, max_det_per_image=100)
    for mine, ref in zip(ours, theirs, strict=True):
        count = int((ref[:, 5] > 0).sum())
        assert count == len(mine["scores"]) == 100
        torch.testing.assert_close(mine["boxes"], ref[:count, :4], atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(mine["scores"], ref[:count, 4])
        assert torch.equal(mine["labels"], ref[:count, 5].long())  # 1..C as effdet's


def test_overflowing_size_codes_give_boxes_clipped_to_the_input(model: EfficientDetD0) -> None:
    """A size code past ~89 overflows exp in float32; the boxes stay finite, inside the input, and NMS
    (which has no defined result on infinite boxes) sees ordinary boxes."""
    with torch.no_grad():
        class_outputs, box_outputs = model(torch.randn(1, 3, 128, 128))
    box_outputs = [torch.full_like(b, 120.0) for b in box_outputs]
    (result,) = detections(class_outputs, box_outputs, anchor_boxes(model), 3, 128, PostprocessConfig())
    assert len(result["boxes"]) > 0
    assert torch.isfinite(result["boxes"]).all()
    assert result["boxes"].min() >= 0.0 and result["boxes"].max() <= 128.0


def test_task_predictions_are_normalized_with_labels_from_one(model: EfficientDetD0) -> None:
    task = EfficientDetTask(dict(ARGS))
    predictions = task.predict(model, torch.randn(1, 3, 128, 128))
    (pred,) = predictions
    assert pred["boxes"].shape == (100, 4) and pred["boxes"].min() >= 0.0 and pred["boxes"].max() <= 1.0
    assert pred["labels"].min() >= 1 and pred["labels"].max() <= 3
    assert torch.all(pred["scores"][:-1] >= pred["scores"][1:])


def test_task_refuses_a_missing_backbone_choice() -> None:
    with pytest.raises(ValueError, match="efficientdet-d0 needs --backbone"):
        EfficientDetTask({"num_classes": 3, "backbone": "resnet50"})
