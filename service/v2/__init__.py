"""The Open Inference Protocol (KServe v2) over REST: schemas, tensor coding and inference.

The routes live in `service.routes.v2_models` and `service.routes.v2_repository`; they share the native
API's batcher, limits, metrics and error mapping.
"""
