"""Fetching http(s) URL inputs without turning the server into a proxy into its own network.

Off unless `allow_url_inputs`. Every address a URL resolves to, and every redirect's, must be public
(not private, loopback, link-local, metadata, reserved, multicast) unless `allow_private_urls` is set or
it lies in `url_allow_networks`. The check runs on the resolved address that is then connected to, so a
name cannot pass the check and connect elsewhere. Bodies are streamed and cut at the size cap.

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): a URL's scheme,
addresses, redirects, status and size are known only while it is fetched.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver

from config.errors import InvalidRequest

MAX_REDIRECTS = 5
REDIRECTS = {301, 302, 303, 307, 308}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class UrlPolicy:
    allow_private: bool
    allowed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    timeout_s: float
    max_bytes: int

    def address_allowed(self, address: IPAddress) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if self.allow_private or any(address in network for network in self.allowed_networks):
            return True
        return address.is_global and not address.is_multicast


class BlockedAddress(Exception):
    pass


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, refusing names that resolve to an address the policy does not allow."""

    def __init__(self, policy: UrlPolicy) -> None:
        self._policy = policy
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        resolved = await self._inner.resolve(host, port, family)
        for entry in resolved:
            if not self._policy.address_allowed(ipaddress.ip_address(entry["host"])):
                raise BlockedAddress(f"{host} resolves to {entry['host']}, a non-public address")
        return resolved

    async def close(self) -> None:
        await self._inner.close()


class UrlFetcher:
    def __init__(self, policy: UrlPolicy) -> None:
        self.policy = policy
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(resolver=GuardedResolver(self.policy), limit=64, use_dns_cache=False)
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,  # no proxies from env
                timeout=aiohttp.ClientTimeout(total=self.policy.timeout_s),
            )
        return self._session

    async def fetch(self, url: str, where: str) -> bytes:
        try:
            return await asyncio.wait_for(self._follow(url, where), self.policy.timeout_s)
        except TimeoutError:
            raise InvalidRequest(
                f"{where}: fetching {url} timed out after {self.policy.timeout_s:g} s", param="input"
            ) from None
        except BlockedAddress as exc:
            raise InvalidRequest(f"{where}: {exc}; URL inputs may only reach public addresses", param="input") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise InvalidRequest(
                f"{where}: fetching {url} failed ({type(exc).__name__}: {exc})", param="input"
            ) from None

    async def _follow(self, url: str, where: str) -> bytes:
        for _ in range(MAX_REDIRECTS + 1):
            self._check_url(url, where)
            async with self._client().get(url, allow_redirects=False) as response:
                if response.status in REDIRECTS and "Location" in response.headers:
                    url = urljoin(url, response.headers["Location"])
                    continue
                if response.status != 200:
                    raise InvalidRequest(f"{where}: {url} answered HTTP {response.status}", param="input")
                return await self._read_capped(response, url, where)
        raise InvalidRequest(f"{where}: {url} redirected more than {MAX_REDIRECTS} times", param="input")

    def _check_url(self, url: str, where: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidRequest(f"{where}: only http(s) URLs can be fetched, not {url[:80]!r}", param="input")
        try:
            literal = ipaddress.ip_address(parts.hostname)
        except ValueError:
            return  # a name: the resolver checks what it resolves to
        if not self.policy.address_allowed(literal):
            raise BlockedAddress(f"{parts.hostname} is a non-public address")

    async def _read_capped(self, response: aiohttp.ClientResponse, url: str, where: str) -> bytes:
        declared = response.content_length
        if declared is not None and declared > self.policy.max_bytes:
            raise InvalidRequest(
                f"{where}: {url} is {declared} bytes; at most {self.policy.max_bytes} are allowed", param="input"
            )
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > self.policy.max_bytes:
                raise InvalidRequest(f"{where}: {url} is larger than {self.policy.max_bytes} bytes", param="input")
        return bytes(body)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
