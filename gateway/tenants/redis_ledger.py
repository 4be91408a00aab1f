"""The tenants' counts in Redis, shared by every replica (`limits.redis_url`): one script call to admit a request
and one when it is answered, each atomic on the server and timed by Redis's own clock, so replicas whose clocks
differ still agree. A tenant's keys share a hash tag (`{name}`): on a Redis Cluster they live on one node.

Concurrency is a sorted set of the requests in flight, each scored with when it lapses (`request_timeout_s` and a
minute): a replica that dies holding requests frees them then, not never.

When Redis fails (down, slow past `limits.redis_timeout_ms`), `limits.on_store_error` decides: `open` lets the
request through uncounted, `closed` refuses it with a 503. Either way it is counted and warned of, and Redis is
left alone for a second before one request tries it again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from config import errors
from config.keys_file import Tenant
from gateway.redis_client import Breaker, redis_client, within
from gateway.tenants.ledger import CONCURRENCY_RETRY_S, UNCOUNTED, Standing, refusal, standing
from gateway.tenants.usage import LIMIT_STORE_ERRORS

logger = logging.getLogger(__name__)
KEY_TTL_S = 120  # a bucket untouched for two minutes is full again: its key may go

# Levels are returned as strings: Redis truncates a script's numbers to integers.
LEVELS = """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1e6
local function level(field, per_minute)
  if per_minute <= 0 then return 0 end
  local saved = redis.call('HMGET', KEYS[1], field, field .. '@')
  if not saved[1] then return per_minute end
  return math.min(per_minute, tonumber(saved[1]) + (now - tonumber(saved[2])) * per_minute / 60)
end
local function save(field, value, per_minute)
  if per_minute > 0 then redis.call('HSET', KEYS[1], field, tostring(value), field .. '@', tostring(now)) end
end
local rpm, tpm, most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local requests, tokens = level('r', rpm), level('t', tpm)
"""
ENTER = (
    LEVELS
    + """
local in_flight = 0
if most > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  in_flight = redis.call('ZCARD', KEYS[2])
end
local refused = ''
if rpm > 0 and requests < 1 then refused = 'requests'
elseif tpm > 0 and tokens <= 0 then refused = 'tokens'
elseif most > 0 and in_flight >= most then refused = 'concurrency' end
if refused == '' then
  if rpm > 0 then requests = requests - 1 end
  if most > 0 then
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[4])
    redis.call('EXPIRE', KEYS[2], math.ceil(tonumber(ARGV[5])))
  end
end
save('r', requests, rpm)
save('t', tokens, tpm)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
return {refused, tostring(requests), tostring(tokens), in_flight}
"""
)
LEAVE = (
    LEVELS
    + """
redis.call('ZREM', KEYS[2], ARGV[4])
tokens = tokens - tonumber(ARGV[5])
save('t', tokens, tpm)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
return {tostring(requests), tostring(tokens)}
"""
)


class RedisLedger:
    """`Ledger` in the Redis at `url`; a request's lapse is `lease_s` after it is admitted. A Redis that failed is
    left alone a second on `clock` (`gateway.redis_client.Breaker`)."""

    def __init__(
        self, url: str, timeout_s: float, lease_s: float, fail_open: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client = redis_client(url, timeout_s)
        self._enter = self.client.register_script(ENTER)
        self._leave = self.client.register_script(LEAVE)
        self.timeout_s, self.lease_s, self.fail_open = timeout_s, lease_s, fail_open
        self.breaker = Breaker(clock=clock, one_probe=False)
        self._abandoned: set[asyncio.Task] = set()

    async def enter(self, tenant: Tenant, request_id: str) -> Standing:
        answer = await self._call(self._enter, tenant, request_id, self.lease_s)
        if answer is None:
            return UNCOUNTED
        refused, requests, tokens, in_flight = answer
        if not refused:
            return standing(tenant, float(requests), float(tokens))
        reason, retry_after = refusal(tenant, float(requests), float(tokens), int(in_flight))
        return standing(
            tenant, float(requests), float(tokens), reason or refused.decode(), retry_after or CONCURRENCY_RETRY_S
        )

    async def leave(self, tenant: Tenant, request_id: str, tokens: int) -> Standing:
        try:
            answer = await self._call(self._leave, tenant, request_id, tokens)
        except errors.NotReady:  # answered already: nothing to refuse
            answer = None
        if answer is None:
            return UNCOUNTED
        return standing(tenant, float(answer[0]), float(answer[1]))

    async def _call(self, script, tenant: Tenant, request_id: str, last: float) -> list | None:
        """The script's answer; None when Redis failed and limits fail open (NotReady when closed)."""
        keys = [f"embento:tenant:{{{tenant.name}}}:buckets", f"embento:tenant:{{{tenant.name}}}:in_flight"]
        args = [
            tenant.requests_per_minute or 0,
            tenant.tokens_per_minute or 0,
            tenant.max_concurrent_requests or 0,
            request_id,
            last,
            KEY_TTL_S,
        ]
        try:
            if not self.breaker.may_try():
                raise ConnectionError("Redis failed less than a second ago")
            answer = await within(script(keys=keys, args=args), self.timeout_s, self._abandoned)
            self.breaker.succeeded()
            return answer
        except Exception as exc:
            LIMIT_STORE_ERRORS.inc()
            outcome = "let through" if self.fail_open else "refused"
            self.breaker.failed(f"the Redis of the API keys' limits failed ({exc!r}); requests are {outcome} uncounted")
        if self.fail_open:
            return None
        raise errors.NotReady("the store of the API keys' limits is unavailable; retry shortly")
