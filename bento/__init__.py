"""Packaging and operations: the container image, the model store, containerizing, placement on cores and
GPUs, BentoML patches, and how the server starts, stops and reports start failures."""
