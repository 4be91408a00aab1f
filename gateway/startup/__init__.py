"""Readiness and health as the probes report them (`lifecycle.Lifecycle`): ready once every gateway worker has
warmed up and the model services answer. Warm-up itself is the models' at run time (gateway/served/warmup.py)."""
