import torch

from training.detectors.ssd300.default_boxes import default_boxes_xywh, default_boxes_xyxy
from training.detectors.ssd300.loss import SSDLoss
from training.detectors.ssd300.model import SSD300
from training.detectors.ssd300.targets import assign_targets


def _targets(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    dxyxy = default_boxes_xyxy()
    boxes, labels = [], []
    for i in range(n):
        gt = torch.tensor([[0.1 + 0.1 * i, 0.2, 0.5 + 0.05 * i, 0.7], [0.55, 0.5, 0.95, 0.9]])
        b, lab = assign_targets(gt, torch.tensor([1, 2]), dxyxy)
        boxes.append(b)
        labels.append(lab)
    return torch.stack(boxes), torch.stack(labels)


def test_targets_give_every_object_a_default_box() -> None:
    boxes, labels = _targets(1)
    assert set(labels[0].unique().tolist()) == {0, 1, 2}
    background = labels[0] == 0
    assert torch.allclose(boxes[0][background], default_boxes_xywh()[background])


def test_loss_is_zero_for_perfect_boxes_and_confident_classes() -> None:
    dboxes = default_boxes_xywh()
    boxes, labels = _targets(2)
    criterion = SSDLoss(dboxes)
    from training.box_ops import encode_boxes
    from training.detectors.ssd300.loss import BOX_CODE_WEIGHTS

    locs = encode_boxes(boxes, dboxes, BOX_CODE_WEIGHTS).transpose(1, 2)
    confs = torch.nn.functional.one_hot(labels, 3).float().transpose(1, 2) * 50.0
    assert float(criterion(locs, confs, boxes, labels)) < 1e-4


def test_image_without_objects_contributes_nothing() -> None:
    dboxes = default_boxes_xywh()
    criterion = SSDLoss(dboxes)
    labels = torch.zeros(1, 8732, dtype=torch.int64)
    boxes = dboxes.unsqueeze(0)
    loss = criterion(torch.randn(1, 4, 8732), torch.randn(1, 3, 8732), boxes, labels)
    assert float(loss) == 0.0


def test_loss_finite_and_decreasing_on_a_tiny_batch() -> None:
    torch.manual_seed(0)
    model = SSD300(num_classes=2, backbone="resnet18")
    criterion = SSDLoss(default_boxes_xywh())
    boxes, labels = _targets(2)
    images = torch.randn(2, 3, 300, 300)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(6):
        loss = criterion(*model(images), boxes, labels)
        assert torch.isfinite(loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses
