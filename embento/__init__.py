"""Embento's typed Python client: `from embento import Client`."""

from embento.client import Client, EmbentoClientError

__all__ = ["Client", "EmbentoClientError"]
