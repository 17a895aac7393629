"""The ImageNet normalization every backbone here was built for (RGB, on the 0-1 scale)."""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
