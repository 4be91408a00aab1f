"""The gateway: the HTTP service in front of the model services, a pipeline in one direction (docs/architecture.md).

A request goes `http/` (the routes, the middleware, the worker's assembly) → `wire/` (its client family's body
into a query) → `engine.py`, which checks the query once (`validation/`), answers what `cache/` holds, makes rows
(`inputs/`) and sends them through `queue/` (admission, coalescing, priority, the calls to the model services) →
`results.py` → `wire/` (the result into the family's answer) → `answering.py` (the answer, or the error in
`error_responses.py`'s vocabulary). Beside the pipeline: `served/`, the models at run time with one owner;
`tenants/`, keys and limits; `jobs/`, bulk jobs that answer their lines through the same adapters; `startup/`,
readiness. Nothing below `http/` imports it, and `wire/` imports neither `http/` nor `jobs/`
(tests/architecture/test_layers.py).
"""
