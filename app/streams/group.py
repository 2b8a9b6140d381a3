"""Consumer-group upkeep: keeping a live consumer's claim fresh, and removing dead consumers.

Touching a claim: another consumer takes over an entry once it has been idle for
`claim_min_idle_ms`. A live consumer working through a slow batch (or retrying one through an
outage) must not look dead, so while it holds entries it re-claims them for itself every few
seconds with `XCLAIM … JUSTID`, which resets their idle time without counting a delivery. Only
entries it still owns are touched (checked in the same script), so a consumer never takes an
entry back from one that reclaimed it.

Removing dead consumers: a consumer that died stays in the group's consumer list forever
unless someone deletes it. Once its entries were reclaimed (pending 0) and it has not touched
the group for a while, `XGROUP DELCONSUMER` removes it. The final check and the delete run in
one script, so a consumer that reads an entry in between can never have it dropped from the
pending list (which DELCONSUMER would do). Deleting a live consumer with nothing pending would
be harmless (its next read registers it again), but a live consumer looks idle on a quiet
partition (reads that find nothing do not refresh it), so the caller spares consumers whose
heartbeat is alive to avoid the churn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from app.streams.entries import StreamEntry

_log = logging.getLogger(__name__)

# KEYS[1] stream; ARGV[1] group, ARGV[2] consumer, ARGV[3..] entry ids. JUSTID goes last in
# the argument table: Lua expands unpack() fully only as the final argument of a call.
_TOUCH = """
local args = {KEYS[1], ARGV[1], ARGV[2], 0}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #p > 0 then args[#args + 1] = ARGV[i] end
end
local mine = #args - 4
if mine > 0 then
  args[#args + 1] = 'JUSTID'
  redis.call('XCLAIM', unpack(args))
end
return mine
"""

# KEYS[1] stream; ARGV[1] group, ARGV[2] min idle ms, ARGV[3..] names that may go.
# Returns the names removed.
_REMOVE_IDLE = """
local wanted = {}
for i = 3, #ARGV do wanted[ARGV[i]] = true end
local removed = {}
local min_idle = tonumber(ARGV[2])
for _, row in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local info = {}
  for i = 1, #row, 2 do info[row[i]] = row[i + 1] end
  local name = info['name']
  if wanted[name] and tonumber(info['pending']) == 0 and tonumber(info['idle']) >= min_idle then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    removed[#removed + 1] = name
  end
end
return removed
"""

# Ids per script call: Lua's unpack() has a stack limit of a few thousand values.
TOUCH_CHUNK = 1000


def vanished(exc: BaseException) -> bool:
    """NOGROUP: the partition or its group is gone (deleted, or lost with a master whose
    replica took over): it is recreated from the start, and what it still holds is redone."""
    return isinstance(exc, redis.ResponseError) and "NOGROUP" in str(exc)


class GroupUpkeep:
    """The two scripts, registered once per client (EVALSHA, reloaded if Redis restarted)."""

    def __init__(self, client: redis.Redis, group: str) -> None:
        self.client = client
        self.group = group
        self._touch = client.register_script(_TOUCH)
        self._remove = client.register_script(_REMOVE_IDLE)

    def create(self, streams: Sequence[str]) -> None:
        """Create the group on every stream, from its start (MKSTREAM); idempotent."""
        for stream in streams:
            try:
                self.client.xgroup_create(stream, self.group, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def touch(self, stream: str, consumer: str, entry_ids: Sequence[str]) -> int:
        """Reset the idle time of those of `entry_ids` that `consumer` still owns."""
        touched = 0
        for start in range(0, len(entry_ids), TOUCH_CHUNK):
            chunk = list(entry_ids[start : start + TOUCH_CHUNK])
            touched += int(self._touch(keys=[stream], args=[self.group, consumer, *chunk]))
        return touched

    def touch_held(self, consumer: str, entries: Sequence[StreamEntry]) -> None:
        """Touch what `consumer` holds of `entries`, on every stream they come from. A failed
        touch (Redis away) costs at worst a reclaim by someone else: logged, not raised."""
        by_stream: dict[str, list[str]] = {}
        for entry in entries:
            by_stream.setdefault(entry.stream, []).append(entry.entry_id)
        try:
            for stream, ids in by_stream.items():
                self.touch(stream, consumer, ids)
        except redis.RedisError as exc:
            _log.debug("could not touch %d held entries: %s", len(entries), exc)

    def idle_consumers(self, stream: str, *, idle_ms: int) -> list[str]:
        """Consumers of the group with nothing pending, idle for at least `idle_ms` (a
        snapshot: `remove` checks again, atomically)."""
        return [
            self._names([row["name"]])[0]
            for row in self.client.xinfo_consumers(stream, self.group)
            if int(row["pending"]) == 0 and int(row["idle"]) >= idle_ms
        ]

    def remove(self, stream: str, names: Sequence[str], *, idle_ms: int = 0) -> list[str]:
        """Delete those of `names` that still have nothing pending and are idle >= `idle_ms`."""
        if not names:
            return []
        return self._names(self._remove(keys=[stream], args=[self.group, idle_ms, *names]))

    @staticmethod
    def _names(reply: Any) -> list[str]:
        return [n.decode(errors="replace") if isinstance(n, bytes) else str(n) for n in reply]


@contextmanager
def keep_touching(touch: Callable[[], None], *, every_s: float, at_most_s: float) -> Iterator[None]:
    """Call `touch` every `every_s` while the body runs (a batch in the handler), for at most
    `at_most_s`: a handler stuck longer than that lets another consumer take its entries."""
    done = threading.Event()

    def renew() -> None:
        started = time.monotonic()
        while not done.wait(every_s):
            if time.monotonic() - started > at_most_s:
                _log.warning("batch held over %.0fs; no longer touching it", at_most_s)
                return
            touch()

    renewer = threading.Thread(target=renew, name="engram-claim-touch", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        done.set()
        renewer.join()
