"""The state one running server's processes share, in files: not configuration, and no process's own.

- `server_files`: where the shared files live (named by the arbiter, removed when it exits), the gateway workers'
  marks the model services drain behind.
- `shared_table`: an integer table every process maps (the gateway's shared counts, the requests' pins).
- `model_set`: which models the server should hold (the wanted set) and what each model-service worker holds (its
  status file); the gateway workers write the first (gateway/served/), the model services follow it
  (runners/residency.py).
- `kept_models`: the wanted set kept across restarts (`<cache_dir>/run-time-models.json`), written at each change
  under the set's lock and read at the start, reconciled with the configuration; `server_model_set`, the server's
  shared set started from it.

Below gateway/, runners/ and bento/, which all reach it without importing each other; it imports config/ only.
"""
