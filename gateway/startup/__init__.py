"""From start to serving: warm-up (every model answers a real call; int8 calibration) and the readiness and health
the probes report."""
