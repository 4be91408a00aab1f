"""Tenants: API keys with their own models, rates, concurrency and share of a saturated model service
(docs/tenants.md)."""
