"""The Open Inference Protocol (KServe v2) over REST: schemas, tensor coding and inference.

The routes live in `service.v2.routes` and `service.v2.repository_routes`; they share the native
API's batcher, limits, metrics and error mapping.
"""
