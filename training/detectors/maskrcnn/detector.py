"""Mask R-CNN's entries in the registry (``training.detectors.registry``): torchvision's v1 and v2 builds."""

from __future__ import annotations

from training.detectors.maskrcnn.export import MaskRCNNV2Wrapper, MaskRCNNWrapper
from training.detectors.maskrcnn.model import maskrcnn_resnet50_fpn, maskrcnn_resnet50_fpn_v2
from training.detectors.maskrcnn.task import MaskRCNNTask, MaskRCNNV2Task
from training.detectors.maskrcnn.weights import torchvision_maskrcnn_checkpoint
from training.detectors.spec import Detector

DETECTORS = (
    Detector(
        "maskrcnn_resnet50_fpn",
        build_model=maskrcnn_resnet50_fpn,
        task=MaskRCNNTask,
        export_wrapper=MaskRCNNWrapper,
        weight_readers=(torchvision_maskrcnn_checkpoint,),  # v1 and v2 files
    ),
    Detector(
        "maskrcnn_resnet50_fpn_v2",
        build_model=maskrcnn_resnet50_fpn_v2,
        task=MaskRCNNV2Task,
        export_wrapper=MaskRCNNV2Wrapper,
    ),
)
