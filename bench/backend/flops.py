"""GFLOP per image of a checkpoint's network, counted by PyTorch's own ``FlopCounterMode``.

``torch.utils.flop_counter.FlopCounterMode`` records the aten operators one eager forward pass
dispatches and applies each one's FLOP formula (convolution: 2 x output elements x input channels per
group x kernel area; matmul: 2 x m x n x k), so a multiply-add counts as 2 FLOPs. Operators without a
formula (BatchNorm, activations, pooling, interpolation, additions) count as 0: on these detectors they
are well under 1% of the convolutions' work. The count is of the network alone (normalized input to raw
head outputs), at batch 1 and the artifact's input size; box decoding and NMS are not included. On
NVIDIA's SSD300-ResNet-50 it gives 40.3 GFLOP, the figure in reference/measured-here.md.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_gflops(network: nn.Module, input_shape: tuple[int, int, int]) -> float:
    """GFLOP of one eager forward pass of ``network`` on a zero image of ``input_shape`` (C, H, W)."""
    network = network.eval()
    example = torch.zeros((1, *input_shape))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        network(example)
    return cast("float", counter.get_total_flops() / 1e9)


def checkpoint_gflops(checkpoint: str) -> float:
    """GFLOP per image of a checkpoint's network at its export input size."""
    from exporters.onnx.wrappers import wrapper_for
    from training.weights import load_checkpoint

    ckpt = load_checkpoint(checkpoint)
    wrapper = wrapper_for(ckpt)
    height, width = wrapper.input_size
    return count_gflops(wrapper.network, (3, height, width))
