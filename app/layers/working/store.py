"""L1 working memory in Redis: each user's last N turns across channels, with token counts.

Per user: a sorted set of turns scored by their timestamp, a sorted set of the ids seen
recently, a state hash (token count, summary, eviction watermark) and a list of evicted turns
waiting to be folded into the summary. Every key has the idle TTL, renewed on each update.

The Lua script makes replays harmless and late arrivals count: a turn whose id was seen is
skipped (even if re-sent with other content: the first version wins, as in L2); a new turn
newer than the eviction watermark joins the window; a new turn at or below it (a reclaimed
entry processed after later ones, or a backfill) goes straight to the summary. Ids are
remembered for `working_replay_horizon_s` behind the watermark; turns older than that are left
to L2 alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from json.encoder import encode_basestring as _quote

import redis

from app.config import Settings
from app.keys import RedisKeys
from app.layers.working.summary import fold_summary
from app.redis_client import run_script
from app.text.tokens import count_tokens

_PUSH = """
local window = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local now = ARGV[3]
local horizon = tonumber(ARGV[4])
local watermark = tonumber(redis.call('HGET', KEYS[2], 'evicted_score') or '-1')
local tokens = 0
local late = 0
for i = 5, #ARGV, 4 do
    local score = tonumber(ARGV[i])
    local id = ARGV[i + 3]
    if score > watermark - horizon and not redis.call('ZSCORE', KEYS[4], id) then
        redis.call('ZADD', KEYS[4], score, id)
        if score > watermark then
            redis.call('ZADD', KEYS[1], score, ARGV[i + 1])
            tokens = tokens + tonumber(ARGV[i + 2])
        else
            redis.call('RPUSH', KEYS[3], ARGV[i + 1])
            late = late + 1
        end
    end
end
local size = redis.call('ZCARD', KEYS[1])
local evicted = 0
if size > window then
    local old = redis.call('ZRANGE', KEYS[1], 0, size - window - 1, 'WITHSCORES')
    redis.call('ZREMRANGEBYRANK', KEYS[1], 0, size - window - 1)
    for i = 1, #old, 2 do
        redis.call('RPUSH', KEYS[3], old[i])
        tokens = tokens - cjson.decode(old[i])['tokens']
    end
    watermark = tonumber(old[#old])
    redis.call('HSET', KEYS[2], 'evicted_score', old[#old])
    evicted = #old / 2
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (watermark - horizon))
redis.call('HINCRBY', KEYS[2], 'token_count', tokens)
redis.call('HSET', KEYS[2], 'turn_count', math.min(size, window), 'updated_at', now)
for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ttl) end
return {evicted + late, redis.call('LLEN', KEYS[3])}
"""


# json.dumps(member, sort_keys=True, ensure_ascii=False, separators=(",", ":")), by hand.
# `arrival` leads the member, so turns of one score (one millisecond: a session a producer
# stamped with one time) sort in the order they were sent.
_MEMBER = (
    '{"arrival":%s,"at":%s,"channel":%s,"content":%s,"id":%s,"role":%s,"speaker":%s,"tokens":%d}'
)


@dataclass(frozen=True)
class WorkingTurn:
    id: str
    role: str
    speaker: str
    channel: str
    content: str
    tokens: int
    at: datetime
    arrival: str = ""  # message_order.arrival_key of its stream entry

    def member(self) -> str:
        """The turn as compact JSON with sorted keys (the sorted set's member), written out
        field by field: every ingested turn is one, and a general encoder costs twice as much."""
        return _MEMBER % (
            _quote(self.arrival),
            _quote(self.at.isoformat()),
            _quote(self.channel),
            _quote(self.content),
            _quote(self.id),
            _quote(self.role),
            _quote(self.speaker),
            self.tokens,
        )

    @classmethod
    def from_member(cls, raw: bytes | str) -> WorkingTurn:
        data = json.loads(raw)
        return cls(
            id=data["id"],
            role=data["role"],
            speaker=data["speaker"],
            channel=data["channel"],
            content=data["content"],
            tokens=int(data["tokens"]),
            at=datetime.fromisoformat(data["at"]),
            arrival=data.get("arrival", ""),
        )

    def order(self) -> tuple[datetime, str]:
        """Message order: time, then arrival (app/layers/episodic/message_order.py)."""
        return self.at, self.arrival


@dataclass(frozen=True)
class WorkingMemory:
    tenant_id: str
    user_id: str
    turns: list[WorkingTurn]
    token_count: int
    summary: str
    summary_tokens: int
    turns_summarised: int


# Evicted turns wait in a list and are folded into the summary in groups (one WATCH round trip
# per group), and always before the memory is read or flushed, so readers never see them late.
FOLD_AFTER = 100


def _score(at: datetime) -> int:
    return int(at.timestamp() * 1000)


class WorkingMemoryStore:
    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.keys = RedisKeys.from_settings(settings)
        self._push = client.register_script(_PUSH)

    def _user_keys(self, tenant_id: str, user_id: str) -> list[str]:
        return [
            self.keys.working_turns(tenant_id, user_id),
            self.keys.working_state(tenant_id, user_id),
            self.keys.working_evicted(tenant_id, user_id),
            self.keys.working_seen(tenant_id, user_id),
        ]

    def push(
        self, batches: dict[tuple[str, str], Sequence[WorkingTurn]]
    ) -> dict[tuple[str, str], int]:
        """Add turns for many users in one round trip; returns turns evicted per user."""
        if not batches:
            return {}
        now = datetime.now(UTC).isoformat()
        pipe = self.client.pipeline(transaction=False)
        users = list(batches)
        for tenant_id, user_id in users:
            args: list[object] = [
                self.settings.working_turns,
                self.settings.working_idle_ttl_s,
                now,
                self.settings.working_replay_horizon_s * 1000,
            ]
            for turn in batches[(tenant_id, user_id)]:
                args.extend((_score(turn.at), turn.member(), turn.tokens, turn.id))
            run_script(self._push, pipe, keys=self._user_keys(tenant_id, user_id), args=args)
        active = self.keys.working_active()
        pipe.zadd(active, {f"{t}\x1f{u}": time.time() for t, u in users})
        replies = pipe.execute()
        evicted = {user: int(reply[0]) for user, reply in zip(users, replies, strict=False)}
        waiting = {user: int(reply[1]) for user, reply in zip(users, replies, strict=False)}
        for user, count in waiting.items():
            if count >= FOLD_AFTER:
                self.fold_evicted(*user)
        return evicted

    def fold_evicted(self, tenant_id: str, user_id: str) -> None:
        """Fold evicted turns into the rolling summary; WATCH makes concurrent folds safe."""
        _, state_key, evicted_key, _ = self._user_keys(tenant_id, user_id)
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(evicted_key, state_key)
                    raw = pipe.lrange(evicted_key, 0, -1)
                    if not raw:
                        pipe.unwatch()
                        return
                    state = pipe.hmget(state_key, "summary", "turns_summarised")
                    summary = (state[0] or b"").decode()
                    done = int(state[1] or 0)
                    turns = sorted(map(WorkingTurn.from_member, raw), key=WorkingTurn.order)
                    summary = fold_summary(
                        summary,
                        [(t.speaker, t.content) for t in turns],
                        self.settings.working_summary_tokens,
                    )
                    pipe.multi()
                    pipe.hset(
                        state_key,
                        mapping={
                            "summary": summary,
                            "summary_tokens": count_tokens(summary),
                            "turns_summarised": done + len(turns),
                        },
                    )
                    pipe.ltrim(evicted_key, len(raw), -1)
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue

    def read(self, tenant_id: str, user_id: str) -> WorkingMemory | None:
        self.fold_evicted(tenant_id, user_id)
        turns_key, state_key, _, _ = self._user_keys(tenant_id, user_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.zrange(turns_key, 0, -1)
        pipe.hgetall(state_key)
        members, state = pipe.execute()
        if not members and not state:
            return None
        fields = {k.decode(): v.decode() for k, v in state.items()}
        return WorkingMemory(
            tenant_id=tenant_id,
            user_id=user_id,
            turns=sorted(map(WorkingTurn.from_member, members), key=WorkingTurn.order),
            token_count=int(fields.get("token_count", 0)),
            summary=fields.get("summary", ""),
            summary_tokens=int(fields.get("summary_tokens", 0)),
            turns_summarised=int(fields.get("turns_summarised", 0)),
        )

    def token_count(self, tenant_id: str, user_id: str) -> int:
        """Tokens in the user's working window: the context-usage trigger reads only this."""
        value = self.client.hget(self.keys.working_state(tenant_id, user_id), "token_count")
        return int(value or 0)

    def idle_users(self, older_than_s: float, limit: int = 1000) -> list[tuple[str, str]]:
        """Users whose working memory has been idle longer than `older_than_s`."""
        cutoff = time.time() - older_than_s
        raw = self.client.zrangebyscore(self.keys.working_active(), 0, cutoff, start=0, num=limit)
        return [tuple(m.decode().split("\x1f", 1)) for m in raw]  # type: ignore[misc]

    def forget_active(self, users: Sequence[tuple[str, str]], older_than_s: float) -> None:
        """Drop flushed users from the active index unless they became active again since."""
        cutoff = time.time() - older_than_s
        script = (
            "local s = redis.call('ZSCORE', KEYS[1], ARGV[1]) "
            "if s and tonumber(s) <= tonumber(ARGV[2]) then "
            "redis.call('ZREM', KEYS[1], ARGV[1]) end"
        )
        pipe = self.client.pipeline(transaction=False)
        for tenant_id, user_id in users:
            # EVAL as a plain command: a cluster pipeline's `eval` method takes no arguments.
            pipe.execute_command(
                "EVAL", script, 1, self.keys.working_active(), f"{tenant_id}\x1f{user_id}", cutoff
            )
        pipe.execute()
