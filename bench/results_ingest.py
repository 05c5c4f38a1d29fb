#!/usr/bin/env python3
"""Measure ``flagperf-ansible results ingest`` of a 100-round run: the whole command, as a user
runs it (a fresh process: imports, reading and checking the 100 round.json files, storing).

    python bench/results_ingest.py [--rounds 100] [--repeat 3] [--db URL]

The run is written once by the real writers (the driver's PerfLog emitter and
``finalize_round``, through ``tests/run_outputs.py``: one case, ``--rounds`` rounds). Three
ingests are timed, each the median of ``--repeat`` runs, wall clock and CPU (user + system)
of the command:

* into a new SQLite file (the migration included);
* into a database already at the newest schema, holding another run (a week's run added to a
  team's database: the usual case); the run is deleted again between repeats;
* the same run again (found unchanged, nothing written).

``--db`` times the second and third against that database instead (e.g. a PostgreSQL
server). It prints figures only: nothing is asserted. Goal: under 2 s for a 100-round run.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for part in ("src", "benchmarks", "tests"):
    sys.path.insert(0, str(ROOT / part))


def timed(command: list[str]) -> tuple[float, float]:
    """``(wall s, CPU s)`` of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stdout + done.stderr
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--db", help="time the usual and unchanged ingests against this URL")
    args = parser.parse_args()

    from sqlalchemy import delete

    from flagperf_ansible.results.db.engine import connect, writing
    from flagperf_ansible.results.db.schema import runs
    from run_outputs import make_run

    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp) / "run20261128000000", [10.0 + i * 0.01 for i in range(args.rounds)])
        other = make_run(Path(tmp) / "other" / "run20261121000000", [10.0, 10.1])
        ingest = [sys.executable, "-m", "flagperf_ansible", "results", "ingest"]
        print(f"a run of {args.rounds} rounds; python {sys.version.split()[0]}; "
              f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; median of "
              f"{args.repeat}")
        fresh = []
        for index in range(args.repeat):
            url = f"sqlite:///{tmp}/fresh{index}.db"
            fresh.append(timed([*ingest, str(run), "--db", url]))
        url = args.db or f"sqlite:///{tmp}/team.db"
        timed([*ingest, str(other), "--db", url])
        usual, unchanged = [], []
        for _ in range(args.repeat):
            usual.append(timed([*ingest, str(run), "--db", url]))
            unchanged.append(timed([*ingest, str(run), "--db", url]))
            with writing(connect(url)) as connection:
                connection.execute(delete(runs).where(runs.c.run_id == run.name))
        print(f"{'ingest':<42} {'wall s':>8} {'CPU s':>8}")
        for name, found in (("into a new SQLite file (migrating)", fresh),
                            (f"into a database at head ({'--db' if args.db else 'SQLite'})",
                             usual),
                            ("the same run again (unchanged)", unchanged)):
            print(f"{name:<42} {statistics.median(w for w, _ in found):>8.2f} "
                  f"{statistics.median(c for _, c in found):>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
