"""SSD320 (NVIDIA v1.2, TF ssd320_full): ResNet-50 FPN, weight-shared heads, focal loss."""
