"""Removing given turns from a user's L1 working memory (clearing a session, deleting a trace).

L1 is one window per user across sessions, so a session is cleared from it turn by turn: its
turns leave the window (the token and turn counts follow), the list waiting to be folded and
the replay-id set. The rolling summary is text that cannot be unfolded: when any of the turns
was already evicted (at or below the eviction watermark, so possibly folded in), the summary
is dropped, in Redis here and in Postgres by `forget_summary`. One Lua script per user, so a
concurrent push or fold sees the window before or after, never half-way (a fold WATCHes the
keys this touches and retries).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import redis
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.config import Settings
from app.keys import RedisKeys

_PRUNE = """
local oldest = tonumber(ARGV[1])
local wanted = {}
for i = 2, #ARGV do wanted[ARGV[i]] = true end
local removed, tokens = 0, 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local turn = cjson.decode(member)
    if wanted[turn['id']] then
        redis.call('ZREM', KEYS[1], member)
        tokens = tokens + tonumber(turn['tokens'])
        removed = removed + 1
    end
end
for _, member in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    if wanted[cjson.decode(member)['id']] then
        redis.call('LREM', KEYS[3], 0, member)
        removed = removed + 1
    end
end
for i = 2, #ARGV do redis.call('ZREM', KEYS[4], ARGV[i]) end
local summary_dropped = 0
if redis.call('EXISTS', KEYS[2]) == 1 then
    if tokens > 0 then redis.call('HINCRBY', KEYS[2], 'token_count', -tokens) end
    redis.call('HSET', KEYS[2], 'turn_count', redis.call('ZCARD', KEYS[1]))
    local watermark = tonumber(redis.call('HGET', KEYS[2], 'evicted_score') or '-1')
    if oldest <= watermark and redis.call('HEXISTS', KEYS[2], 'summary') == 1 then
        redis.call('HDEL', KEYS[2], 'summary', 'summary_tokens', 'turns_summarised')
        summary_dropped = 1
    end
end
return {removed, summary_dropped}
"""


@dataclass(frozen=True)
class Pruned:
    turns: int  # turn entries removed from the window and the fold list
    summary_dropped: bool  # the summary may have held them, so it went


def prune_turns(
    client: redis.Redis,
    settings: Settings,
    *,
    tenant_id: str,
    user_id: str,
    turns: Sequence[tuple[str, datetime]],
) -> Pruned:
    """Remove these (turn id, occurred_at) from the user's working memory."""
    if not turns:
        return Pruned(0, False)
    keys = RedisKeys.from_settings(settings)
    oldest = min(int(at.timestamp() * 1000) for _, at in turns)
    reply = client.eval(
        _PRUNE,
        4,
        keys.working_turns(tenant_id, user_id),
        keys.working_state(tenant_id, user_id),
        keys.working_evicted(tenant_id, user_id),
        keys.working_seen(tenant_id, user_id),
        oldest,
        *[turn_id for turn_id, _ in turns],
    )
    return Pruned(turns=int(reply[0]), summary_dropped=bool(reply[1]))


def forget_summary(*, session: Session, user_id: str, since: datetime) -> int:
    """Drop the user's flushed summary when it was written after `since` (so it may quote
    turns from then on); rows removed."""
    result = session.execute(
        text(
            "DELETE FROM working.summaries WHERE user_id = :user"
            " AND (last_turn_at IS NULL OR last_turn_at >= :since)"
        ),
        {"user": user_id, "since": since},
    )
    return int(getattr(result, "rowcount", 0) or 0)
