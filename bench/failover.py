"""Failover benchmark: turns lost and duplicated when a Redis Cluster master is SIGKILLed
mid-ingest, with and without the producers waiting for one replica's acknowledgement
(ENGRAM_STREAM_WAIT_REPLICAS=1), and what that wait costs the producers.

Each round starts a fresh local cluster of three masters and three replicas from the system's
redis-server (tests/cluster.py, node timeout 1 s) and runs the scenario of tests/failover.py:
producer threads push turns through EventProducer as fast as they can, stream consumers in
threads store them through the real ingest service into Postgres; once 30% of the turns are
accepted (and some stored), the master holding the most partitions being written is killed;
its replica takes over; the dead node is started again and rejoins as a replica. Producers
resend a refused batch (same external ids) until it is accepted. Rounds alternate the two
modes, so the machine's load falls on both alike.

* lost: turns a producer was told were accepted that never reached Postgres;
* duplicated: extra deliveries of turns the consumers committed (a stream entry consumed
  twice after its ack died with the master, or a resent batch whose first copy survived),
  plus any turn stored twice (the primary key forbids it; counted anyway);
* throughput: turns accepted per second by the producers before the kill, same run.

Runs on its own database (`engram_bench_failover`); each cluster lives in a temporary folder.
Last line: `failover lost_without_wait=<N> lost_with_wait=<N> duplicated_without_wait=<N>
duplicated_with_wait=<N> wait_throughput_ratio=<N>`
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("ENGRAM_DATABASE_NAME", "engram_bench_failover")

from app.cli.supervisor import fresh_database
from app.config import get_settings
from app.text.tokens import count_many
from tests.cluster import local_cluster, missing_binaries
from tests.failover import Outcome, Plan, run_failover


def describe(outcome: Outcome) -> str:
    mode = "with wait   " if outcome.wait_replicas else "without wait"
    return (
        f"{mode}: accepted {len(outcome.accepted):,}, lost {outcome.lost}, delivered twice "
        f"{outcome.delivered_twice}, stored twice {outcome.stored_twice}, dead letters "
        f"{outcome.dead_letters}; {outcome.refusals} refused sends; failover "
        f"{outcome.failover_s:.1f}s; producers {outcome.producer_turns_per_s:,.0f} turns/s "
        f"before the kill ({outcome.accepted_before_kill:,} turns)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each mode")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=100, help="batches per producer")
    parser.add_argument("--batch", type=int, default=50, help="turns per batch")
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument(
        "--wait-timeout-ms",
        type=int,
        default=get_settings().stream_wait_timeout_ms,
        help="ENGRAM_STREAM_WAIT_TIMEOUT_MS of the waiting rounds",
    )
    parser.add_argument("--claim-idle-ms", type=int, default=1000)
    args = parser.parse_args()
    reason = missing_binaries()
    if reason:
        raise SystemExit(f"no local Redis Cluster: {reason}")

    base = get_settings().model_copy(
        update={
            "stream_partitions": args.partitions,
            "stream_wait_timeout_ms": args.wait_timeout_ms,
            "claim_min_idle_ms": args.claim_idle_ms,
            "consumer_block_ms": 50,
        }
    )
    services = fresh_database(base)
    count_many(["warm the tokenizer up before the first round"])
    plan = Plan(
        producers=args.producers,
        batches=args.batches,
        batch_size=args.batch,
        consumers=args.consumers,
        timeout_s=180,
    )
    run = uuid.uuid4().hex[:8]
    outcomes: list[Outcome] = []
    try:
        for index in range(args.rounds * 2):
            wait = index % 2
            settings = base.model_copy(update={"redis_prefix": f"bench-{run}-{index}"})
            with (
                tempfile.TemporaryDirectory(prefix="engram-failover-") as root,
                local_cluster(Path(root), node_timeout_ms=1000) as ports,
            ):
                outcome = run_failover(
                    settings, ports, tenant=f"bench-{run}-{index}", wait_replicas=wait, plan=plan
                )
            outcomes.append(outcome)
            print(describe(outcome), flush=True)
    finally:
        services.stop()

    total = args.producers * args.batches * args.batch
    if any(o.accepted_before_kill >= total for o in outcomes):
        print("warning: a round's producers were done before the kill; its rate is too low")
    plain = [o for o in outcomes if not o.wait_replicas]
    safe = [o for o in outcomes if o.wait_replicas]

    def rate(group: list[Outcome]) -> float:
        turns = sum(o.accepted_before_kill for o in group)
        return turns / sum(o.seconds_before_kill for o in group)

    def duplicated(group: list[Outcome]) -> int:
        return sum(o.delivered_twice + o.stored_twice for o in group)

    print(
        f"rounds={args.rounds} per mode, turns/round={total:,} producers={args.producers} "
        f"batch={args.batch} consumers={args.consumers} partitions={args.partitions} "
        f"wait_timeout_ms={args.wait_timeout_ms}"
    )
    print(
        f"producers before the kill: {rate(plain):,.0f} turns/s without wait, "
        f"{rate(safe):,.0f} with"
    )
    print(
        f"failover lost_without_wait={sum(o.lost for o in plain)} "
        f"lost_with_wait={sum(o.lost for o in safe)} "
        f"duplicated_without_wait={duplicated(plain)} duplicated_with_wait={duplicated(safe)} "
        f"wait_throughput_ratio={rate(safe) / rate(plain):.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
