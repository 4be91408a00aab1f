"""The models a gateway worker serves at run time, as one subsystem with one owner (`models.ServedModels`).

- `registry`: what this worker serves now (`ModelRegistry`): read everywhere, written by the reconciler alone.
- `wanted`: the server's wanted set as this worker reads and changes it (server_state/model_set.py).
- `states`: each model's state across its model service's workers, from their status files.
- `warmup`: a model warmed up here (`Warming`: one real call per modality, calibration, cache identity: the one
  path by which a model becomes served), and the start's policy over every model (`Warmup`); `calibration`.
- `reconciler`: the registry kept to the server: the start's warm-up as its first pass, then the status files
  every 0.1 s (`Reconciler`); `Refreshes`, the passes that requests and admin calls wait on.
- `warm_flags`: which gateway workers serve each model (an admin change answers once every one does).
- `requests`: a request's side: the model it gets (an alias resolved, a lazy or evicted one loaded and waited
  for), its pin (no eviction until it is answered), its `keep_alive`; the one rule of what is servable.
- `admin`: the admin API's operations (gateway/http/admin.py routes onto them); `additions`: a model not in the
  configuration added at run time, and removed (the whole wanted set is kept across restarts:
  server_state/kept_models.py).

The model services' side is runners/residency.py: each of their workers keeps its pool to the same wanted set.
"""
