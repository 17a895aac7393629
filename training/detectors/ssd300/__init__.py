"""SSD300 (NVIDIA DeepLearningExamples v1.1): ResNet backbone, 8732 default boxes, softmax classes."""
