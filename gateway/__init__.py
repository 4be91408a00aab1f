"""The HTTP edge of the gateway service: wire schemas, request validation, errors, guards."""
