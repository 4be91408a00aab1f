"""The state one running server's processes share, in files: not configuration, and no process's own.

- `server_files`: where the shared files live (named by the arbiter, removed when it exits), the gateway workers'
  marks the model services drain behind.
- `shared_table`: an integer table every process maps (the gateway's shared counts, the requests' pins).
- `model_set`: which models the server should hold (the wanted set) and what each model-service worker holds (its
  status file); the gateway workers write the first (gateway/served/), the model services follow it
  (runners/residency.py).

Below gateway/, runners/ and bento/, which all reach it without importing each other; it imports config/ only.
"""
