"""The wire formats: one adapter per client family, from its bodies to the internal queries and from the
results to its answers."""
