"""EfficientDet-D0 (effdet network, timm backbone); effdet is imported when a model is built, not before
(see ``effdet_compat``)."""
