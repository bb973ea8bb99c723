"""Heartbeat cost: writes per Borrower, and whether beating Borrowers slow the Leader or make its CAS fail.

Heartbeats are rows in the catalog database, not Iceberg commits, so they never touch the registry
table whose compare-and-swap the Leaders race on. On SQLite they do share the database's one write
lock with the registry commits. The benchmark measures that effect, side by side in one run:

- two Leaders tick the same group in a loop, each tick re-granting every lease (its run is seen
  failed), so every tick commits the registry and the two Leaders contend as hard as they can;
- meanwhile 0, 2 or 8 Borrowers beat at 0.05 s, 200 times the default rate (session_timeout_s 30
  means a beat every 10 s);
- the arms run interleaved, ROUNDS times, and each reports tick latency (median, p90) and the share
  of ticks that lost the CAS to the other Leader, as ratios to the arm without heartbeats.

Run: ``make bench`` (writes tests/benchmarks/results/heartbeat_cost.json).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from pyiceberg.catalog import Catalog

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.errors import RegistryConflict
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.heartbeats import beat, ensure_table
from tests.factories import append_batches, create_source
from tests.stack_env import home_env

BORROWERS = (0, 2, 8)
ROUNDS = 3
SECONDS = 8.0
BEAT_EVERY_S = 0.05
DEFAULT_SESSION_TIMEOUT_S = 30
RESULTS = Path(__file__).parent / "results" / "heartbeat_cost.json"


def run_arm(catalog: Catalog, group: GroupConfig, borrowers: int) -> dict[str, list[float] | int]:
    """Two racing Leaders for SECONDS while ``borrowers`` threads beat; tick times and conflicts."""
    stop = threading.Event()
    ticks: list[float] = []
    conflicts = 0
    beats = 0
    lock = threading.Lock()

    def leader(name: str) -> None:
        nonlocal conflicts
        while not stop.is_set():
            started = time.perf_counter()
            try:
                tick(catalog, group, lambda _: RunState.FAILED, owner_run_id=name)
            except RegistryConflict:
                with lock:
                    conflicts += 1
            with lock:
                ticks.append((time.perf_counter() - started) * 1000)

    def borrower(name: str) -> None:
        nonlocal beats
        while not stop.wait(BEAT_EVERY_S):
            beat(catalog, group.name, name)
            with lock:
                beats += 1

    threads = [threading.Thread(target=leader, args=(f"leader-{i}",)) for i in range(2)]
    threads += [threading.Thread(target=borrower, args=(f"borrower-{i}",)) for i in range(borrowers)]
    for thread in threads:
        thread.start()
    time.sleep(SECONDS)
    stop.set()
    for thread in threads:
        thread.join()
    return {"ticks_ms": ticks, "conflicts": conflicts, "beats": beats}


def main() -> int:
    """Run the arms interleaved, print and record the ratios."""
    home = Path(tempfile.mkdtemp(prefix="icegroup-bench-hb-"))
    catalog = load_lakehouse(env=home_env(home)).catalog()
    group = GroupConfig.model_validate(
        {"name": "hb", "source": "hb.events", "sink": "hb.out", "shard_caps": {"max_files": 1}, "max_borrowers": 3}
    )
    append_batches(create_source(catalog, group.source), 4, 9)
    ensure_table(catalog)
    tick(catalog, group, lambda _: RunState.MISSING)
    arms: dict[int, dict[str, list[float] | int]] = {n: {"ticks_ms": [], "conflicts": 0, "beats": 0} for n in BORROWERS}
    for _ in range(ROUNDS):
        for borrowers in BORROWERS:
            got = run_arm(catalog, group, borrowers)
            arm = arms[borrowers]
            arm["ticks_ms"] = [*arm["ticks_ms"], *got["ticks_ms"]]  # type: ignore[misc]
            arm["conflicts"] = int(arm["conflicts"]) + int(got["conflicts"])  # type: ignore[call-overload]
            arm["beats"] = int(arm["beats"]) + int(got["beats"])  # type: ignore[call-overload]
    summary = {}
    for borrowers, arm in arms.items():
        ticks = sorted(arm["ticks_ms"])  # type: ignore[type-var]
        summary[borrowers] = {
            "ticks": len(ticks),
            "tick_ms_p50": round(statistics.median(ticks), 1),
            "tick_ms_p90": round(ticks[int(0.9 * (len(ticks) - 1))], 1),
            "cas_lost_share": round(int(arm["conflicts"]) / len(ticks), 3),  # type: ignore[call-overload]
            "beats_per_s": round(int(arm["beats"]) / (ROUNDS * SECONDS), 1),  # type: ignore[call-overload]
        }
    base = summary[0]
    for borrowers, row in summary.items():
        row["tick_p50_ratio"] = round(row["tick_ms_p50"] / base["tick_ms_p50"], 2)
        row["tick_p90_ratio"] = round(row["tick_ms_p90"] / base["tick_ms_p90"], 2)
        print(
            f"{borrowers} borrowers beating at {1 / BEAT_EVERY_S:.0f}/s each: {row['ticks']} ticks, p50 "
            f"{row['tick_ms_p50']} ms ({row['tick_p50_ratio']}x), p90 {row['tick_ms_p90']} ms "
            f"({row['tick_p90_ratio']}x), CAS lost {row['cas_lost_share']:.1%}"
        )
    record = {
        "writes_per_minute_per_borrower_at_default": 60 / (DEFAULT_SESSION_TIMEOUT_S / 3),
        "beat_every_s_in_benchmark": BEAT_EVERY_S,
        "seconds_per_arm": SECONDS,
        "rounds": ROUNDS,
        "arms": {str(k): v for k, v in summary.items()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")
    print(f"recorded {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
