"""BentoML model services, one per modality, each with adaptive batching."""
