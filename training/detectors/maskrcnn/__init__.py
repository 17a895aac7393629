"""Mask R-CNN (torchvision's ResNet-50-FPN v1 and v2 builds)."""
