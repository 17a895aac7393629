"""Dynamic batching: the per-model batcher (`batcher`), its queue of waiting requests (`batch_queue`), how a
batch closes (`batch_close`), the threads that run batches (`batch_worker`, `worker_pool`), the fitted batch
times behind admission and closing (`wait_estimate`), and running lone work on the event loop (`inline`).
It knows nothing about models: it batches opaque items through a ``run_batch`` callable."""
