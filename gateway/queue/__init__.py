"""How big is a batch: the one place that says who cuts a request's rows, where, and by which limits.

One value bounds every pass: a model's `BatchLimits` (`models/batching.py`): rows and padded tokens per forward
pass, as configured (`batch_size`, `max_batch_tokens`) or sized for its device by `batch_limits` (32 rows and 16,384
tokens on a CPU; on a GPU what a quarter of the free memory holds). The model service works them out when it loads
the model (`runners/pool.py` `pass_limits`) and reports them in `ModelInfo`; the gateway learns them at warm-up
(`ModelCalls.learn`) and uses the same value. One cost model cuts passes: `models.batching.plan_batches` (rows
sorted by length, cut where padding plus a per-pass overhead costs least).

Who cuts rows, in the order a request meets them:

1. A request into parts: `model_calls.request_parts`. A request that does not fit one pass goes in one part per
   pass, each queued on its own so other requests get in between. By `plan_batches` and the model's `BatchLimits`.
2. Parts into calls: `coalesce.Coalescer._take`. Live queries (`priority.py`) for a model service with a live lane
   (`ModelInfo.live_lane`: on a CPU) wait in a coalescer of their own and leave at once for its live API, run beside
   the batch in progress; elsewhere they leave first, and indexing and bulk-job calls are cut to the model's
   `pass_budget_ms` while they keep coming. Waiting requests, in priority and fair-share order (`priority.py`,
   `fair_queue.py`), leave as one call to the model service: at most `dispatch_rows` rows; a bulk-job call, or a
   call while several tenants wait, at most one pass (`BatchLimits.fits`).
3. Calls into a service batch: BentoML's adaptive batching (`runners/model_services.py`, `max_batch_size` =
   `dispatch_rows`; `bento/serving/patches.py` `make_work_conserving`: no holding while the model is idle).
4. A batch onto cores (CPU only): `models/inference/lanes.py` `share_out`, one part per core by tokens; small
   batches stay whole.
5. A part into passes: `runners/pool.py` `ModelPool._run_passes`, by `plan_batches` and the model's `BatchLimits`.

`dispatch_rows` (`runners/service_config.dispatch_max_rows`: four passes of the largest configured batch, at least
64) bounds a call only, never a pass: stages 1 and 5 cut by the same limits, so a part the gateway sends alone is
one pass on the model service.

The rest of this package keeps requests apart while they wait: `admission.py` (the queue bounds, 503 past them),
`deadline` handling and cancellation in `model_calls.py`.
"""
