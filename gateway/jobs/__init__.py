"""Bulk jobs: OpenAI's Files and Batches APIs over a durable store, run in the model services' idle capacity."""
