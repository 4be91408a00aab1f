"""The tenant gate: the first check a request meets after its error shape is set (gateway/http/assembly.py).

- Who calls: the key in `Authorization: Bearer`, matched to its tenant (gateway/tenants/keys.py); a 401 if none.
- Within its limits: a POST is admitted by the ledger (gateway/tenants/ledger.py), or refused with a 429 in the
  route's shape, code `rate_limit_exceeded`, `Retry-After` (and `retry-after-ms`, which OpenAI's SDKs read first)
  and OpenAI's `x-ratelimit-*` headers. Answers carry those headers too.
- What it used: the tenant's requests and tokens by model (POSTs), and one access-log line per request, 401s
  included (gateway/tenants/usage.py).

The tenant is set for the request (`TENANT`): the routes answer only with its models, and its rows take their
weighted share of a saturated model service (gateway/queue/fair_queue.py).
"""

from __future__ import annotations

import math
import uuid

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from config import errors
from config.keys_file import Tenant
from gateway.error_responses import error_response
from gateway.metrics import ACCOUNT, Account
from gateway.tenants.keys import ADMIN, OPEN, TENANT, Keyring, Keys
from gateway.tenants.ledger import UNCOUNTED, Ledger, Reading, Standing
from gateway.tenants.usage import THROTTLED, AccessLog, record, start_series

Headers = list[tuple[bytes, bytes]]
# Probes stay open so orchestrators need no key; /metrics too where configured (`public_metrics`).
PROBE_PATHS = frozenset({"/livez", "/readyz", "/healthz", "/health"})
# The admin API is opened by the admin key alone, never a tenant's (gateway/http/admin.py checks it).
ADMIN_PREFIX = "/admin/"
LIMIT_NAMES = {"requests": "requests per minute", "tokens": "tokens per minute", "concurrency": "concurrent requests"}


class TenantGate:
    def __init__(
        self, app: ASGIApp, keys: Keys, ledger: Ledger, open_paths: frozenset[str], access_log: AccessLog
    ) -> None:
        self.app = app
        self.keys = keys
        self.ledger = ledger
        self.open_paths = open_paths
        self.access_log = access_log
        self._counted: Keyring | None = None  # the keyring whose tenants' series are started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A CORS preflight carries no credentials; the probes stay open so that orchestrators need no key.
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] == "OPTIONS" or path in self.open_paths or _admin(path):
            return await self.app(scope, receive, send)
        tenant = self._caller(scope)
        account = Account(tenant.name if tenant else None)
        status = 500

        async def logged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        token = TENANT.set(tenant or OPEN)
        try:
            if tenant is None:
                problem = errors.Unauthorized("missing or invalid API key; send 'Authorization: Bearer <key>'")
                await error_response(problem)(scope, receive, logged)
            elif scope["method"] == "POST":
                await self._answer(tenant, account, scope, receive, logged)
            else:
                await self.app(scope, receive, logged)
        finally:
            TENANT.reset(token)
            self.access_log.write(account, scope["method"], scope["path"], status)

    def _caller(self, scope: Scope) -> Tenant | None:
        keyring = self.keys.current()
        if keyring is not self._counted:
            self._counted = keyring
            start_series(keyring.tenants.values())
        token = bearer_token(scope)
        if keyring.open:  # anyone may call; the admin key makes the admin (who alone may set `keep_alive`)
            return ADMIN if self.keys.is_admin(token) else OPEN
        return keyring.tenant(token) if token is not None else None

    async def _answer(self, tenant: Tenant, account: Account, scope: Scope, receive: Receive, send: Send) -> None:
        """A POST: admitted within its tenant's limits (or refused), answered, and counted."""
        account_token = ACCOUNT.set(account)
        request_id = uuid.uuid4().hex
        status, admitted, left = 500, False, False

        async def send_with_headers(message: Message) -> None:
            nonlocal status, left
            if message["type"] == "http.response.start":
                status = message["status"]
                if admitted:  # answered: its tokens are known, and the headers count them
                    left = True
                    standing = await self.ledger.leave(tenant, request_id, account.tokens)
                    message = {**message, "headers": [*message.get("headers", []), *rate_headers(standing)]}
            await send(message)

        try:
            try:
                standing = await self.ledger.enter(tenant, request_id) if tenant.limited else UNCOUNTED
            except errors.EmbentoError as exc:  # the limits' store failed closed
                return await error_response(exc)(scope, receive, send_with_headers)
            if standing.refused is not None:
                THROTTLED.labels(tenant=tenant.name, limit=standing.refused).inc()
                return await refused(tenant, standing)(scope, receive, send_with_headers)
            admitted = tenant.limited
            await self.app(scope, receive, send_with_headers)
        finally:
            if admitted and not left:  # no answer was sent (the client went, or a bug): the slot back
                await self.ledger.leave(tenant, request_id, account.tokens)
            record(tenant, account, status)
            ACCOUNT.reset(account_token)


def refused(tenant: Tenant, standing: Standing) -> JSONResponse:
    """The 429 of a request over its tenant's limit, with when to retry."""
    assert standing.refused is not None
    wait = max(standing.retry_after_s, 0.001)
    response = error_response(
        errors.RateLimited(
            f"rate limit reached for {LIMIT_NAMES[standing.refused]} of API key '{tenant.name}'; retry in {wait:.3g} s"
        )
    )
    response.headers["retry-after"] = str(math.ceil(wait))
    response.headers["retry-after-ms"] = str(math.ceil(wait * 1000))
    for name, value in rate_headers(standing):
        response.headers[name.decode()] = value.decode()
    return response


def rate_headers(standing: Standing) -> Headers:
    """OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, for the limits the key has."""
    headers: Headers = []
    for kind, found in (("requests", standing.requests), ("tokens", standing.tokens)):
        if found is not None:
            headers += _bucket_headers(kind, found)
    return headers


def _bucket_headers(kind: str, found: Reading) -> Headers:
    return [
        (f"x-ratelimit-limit-{kind}".encode(), str(found.limit).encode()),
        (f"x-ratelimit-remaining-{kind}".encode(), str(found.remaining).encode()),
        (f"x-ratelimit-reset-{kind}".encode(), duration(found.reset_s).encode()),
    ]


def duration(seconds: float) -> str:
    """As OpenAI writes its resets: `20ms`, `1.5s`, `6m0s` (rounded up to the millisecond first)."""
    total_ms = math.ceil(max(0.0, seconds) * 1000)
    if total_ms < 1000:
        return f"{total_ms}ms"
    minutes, rest_ms = divmod(total_ms, 60_000)
    rest = f"{rest_ms / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{minutes}m{rest}" if minutes else rest


def bearer_token(scope: Scope) -> str | None:
    """The key in `Authorization: Bearer <key>`, or None without one."""
    headers = dict(scope.get("headers", []))
    scheme, _, key = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return key.strip() if scheme.lower() == "bearer" else None


def _admin(path: str) -> bool:
    return path.startswith(ADMIN_PREFIX)
