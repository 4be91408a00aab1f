"""The embedding cache: each input's output kept under a key of everything that makes it (`keys`), in each gateway
worker's memory (`memory`) and in a Redis every worker and replica shares (`redis_tier`), looked up before any
tokenizing and filled after the model answers (`tiers`). A request's `Cache-Control` says whether it may read or
write it (`policy`). docs/operations.md, "Embedding cache", has it for operators."""
