"""Run one node's case processes in the background and report on them: the launch role's
host side (run by ``flagperf.benchmark.piped_script`` as ``python3 -m flagperf_host.node_job``).

    flagperf_host.node_job start --output-dir DIR --timeout S [--stop-grace S] [--config-json JSON]
                                 [--input] [--result] -- ARGV...
    flagperf_host.node_job wait --output-dir DIR --seconds S
    flagperf_host.node_job stop --output-dir DIR [--grace S]

``start`` creates DIR, writes ``config.yaml`` there (the case's effective configuration, as
JSON, which is YAML too), starts a detached supervisor and returns once ARGV runs. The
supervisor runs ARGV in DIR with this process's environment, in its own process group,
output to ``DIR/launcher.log``, ends the node (see ``stop``; ``--stop-grace`` seconds, default
10) when ARGV outlives ``--timeout`` seconds, and writes ``DIR/launch.json`` when it ends:
``{"finished": 1, "rc": int|null, "timed_out": bool, "msg": str, "started_ms", "ended_ms"}``
(``msg`` "Timeout exceeded" and ``rc`` null when ended at the timeout).

``--input``: ARGV reads this process's standard input (else the null device): an Ansible
module's payload, given by ``flagperf.benchmark.piped_script``'s ``input_module``, with ARGV
``python3 -``. ``--result``: ARGV's standard output goes to ``DIR/job_result.json`` instead of
``launcher.log`` (a module's result, one JSON document), which ``wait`` then adds as ``result``
and ``stop`` removes (it may hold what the module was given: its arguments, a container's
environment). A round runs a node's container this way (runtime docker): the
``community.docker.docker_container`` module under this supervisor, where an Ansible async job
would cost four more ssh exchanges and a second module run to start.

``wait`` waits on the host up to S seconds (no traffic with the controller meanwhile) and
prints that document once it exists, with the last 4 KiB of ``launcher.log`` as ``stdout``;
``{"finished": 0, "progress": ...}`` while ARGV still runs (``progress``: where rank 0 is, from
its PerfLog lines); ``finished`` with ``rc`` null and a ``msg`` when
the supervisor is gone without a word (killed). One start and one wait per 10 s slice are the
round's only steps on a host for its case, one ssh exchange each and no module run: Ansible's
async jobs cost about four ssh exchanges and a module run to start and a module run per poll.

``stop`` ends the node: a round stops the other nodes this way when one failed, or when the run
is interrupted, and ends every node this way. It sends SIGTERM to ARGV's process group (torchrun
passes it on to its workers), waits up to ``--grace`` seconds (default 5), then sends SIGKILL to
every process of the node that remains, waits up to 5 s for the supervisor to record the end
(``rc`` ARGV's, such as -15 or -9), and removes ``job_result.json``. The group alone is not the
node: torchrun starts its workers in sessions of their own, which a SIGKILL to its group would
orphan (still training, holding the GPU). So the case runs with ``FLAGPERF_NODE_DIR`` set to
DIR, a mark that every process of the node inherits (through setsid and reparenting) and that
``stop`` finds in /proc/<pid>/environ; the supervisor is a child subreaper, so that the case's
orphans are its children, reaped, not init's. The group counts too while the supervisor runs
and has not recorded the end (the group id cannot be another's then); else, only processes
that carry the mark (ids may have been reused).

Each prints one JSON line and exits 0; errors in the arguments exit 2 (argparse).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from flagperf_host.process import (alive, become_subreaper, detach, now_ms, reap, send, stat_fields,
                                   wait_until, write_json)

PROG = "node_job"

STATUS = "launch.json"
PID = "launch.pid"
LOG = "launcher.log"
RESULT = "job_result.json"
#: Rank 0's log in DIR, whose PerfLog lines tell a running node's progress (``wait``).
RANK0_LOG = "rank0.out.log"
PERFLOG = "[PerfLog] "
TIMEOUT_MSG = "Timeout exceeded"   # the words Ansible's async_wrapper uses for the same end
# Set in the case's environment to its folder: marks its processes as this node's (stop).
OWNER_ENV = "FLAGPERF_NODE_DIR"
KILL_WAIT = 5                      # seconds for the killed to vanish and the end to be recorded


def supervise(out: Path, argv: list[str], timeout: float, stop_grace: float, result: bool) -> None:
    """In the detached daemon: run ``argv`` (its standard input this process's; its standard
    output to ``RESULT`` when ``result``), enforce the timeout, record how it ended."""
    started = now_ms()
    become_subreaper()
    try:
        # The result may hold the module's arguments: the ssh user's alone.
        with open(out / LOG, "ab") as log, \
                (open(os.open(out / RESULT, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")
                 if result else contextlib.nullcontext(log)) as stdout:
            child = subprocess.Popen(argv, cwd=out, stdin=0, stdout=stdout,
                                     stderr=log, start_new_session=True,
                                     env={**os.environ, **interpreter_path(argv),
                                          OWNER_ENV: str(out.resolve())})
    except OSError as err:
        write_json(out / STATUS, {"finished": 1, "rc": 127, "timed_out": False,
                                  "msg": f"cannot run {argv[0]}: {err}", "started_ms": started,
                                  "ended_ms": now_ms()})
        return
    (out / PID).write_text(f"{os.getpid()} {child.pid}\n", encoding="utf-8")
    rc = reap(child.pid, time.monotonic() + timeout)
    timed_out = rc is None
    if timed_out:
        end_node(out, child.pid, stop_grace)
        reap(child.pid, float("inf"))
    reap(0, time.monotonic())       # the orphans that ended meanwhile (no child's pid is 0)
    write_json(out / STATUS, {"finished": 1, "rc": rc, "timed_out": timed_out,
                              "msg": TIMEOUT_MSG if timed_out else "", "started_ms": started,
                              "ended_ms": now_ms()})


def interpreter_path(argv: list) -> dict:
    """``{"PATH": ...}`` with the folder of the node's interpreter first, where ``argv[0]`` is a
    Python given by its path (a framework's environment), as an activated environment has it:
    a launcher that starts its workers by name (msrun's ``python``) then finds the same one.
    Empty otherwise."""
    if not (os.path.isabs(argv[0]) and os.path.basename(argv[0]).startswith("python")):
        return {}
    return {"PATH": os.pathsep.join([os.path.dirname(argv[0]), os.environ.get("PATH", "")])}


def make_node_dir(out: Path, config_json: str | None) -> None:
    """The node's folder and its ``config.yaml``."""
    out.mkdir(parents=True, exist_ok=True)
    if config_json is not None:
        config = json.loads(config_json)
        (out / "config.yaml").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")


def start(args: argparse.Namespace) -> dict:
    out = Path(args.output_dir)
    if (out / PID).exists() and not (out / STATUS).exists() and supervisor_alive(out):
        return {"changed": False, "msg": "already running"}
    make_node_dir(out, args.config_json)
    for name in (STATUS, PID, RESULT):
        (out / name).unlink(missing_ok=True)
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise SystemExit(f"{PROG} start: no command after --")
    detach("node_job", lambda: supervise(out, argv, args.timeout, args.stop_grace, args.result),
           keep_stdin=args.input)
    if not wait_until(lambda: (out / PID).exists() or (out / STATUS).exists(), 30, poll=0.02):
        return {"failed": True, "msg": "the case did not start within 30 s"}
    return {"changed": True, "msg": "started"}


def supervisor_alive(out: Path) -> bool:
    """Whether the supervisor recorded in the pid file still runs."""
    try:
        return alive(int((out / PID).read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return False


def mark_of(out: Path) -> bytes:
    """The entry of the node's processes' environment that marks them as the node's."""
    return f"{OWNER_ENV}={out.resolve()}".encode()


def owned_by(pid: int | None, mark: bytes) -> bool:
    """Whether process ``pid``'s environment holds ``mark`` (see ``mark_of``)."""
    try:
        return mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def node_processes(mark: bytes, group: int | None) -> dict[int, int]:
    """The node's live processes, pid -> process group: those of process group ``group`` and
    those that carry ``mark``. Zombies are gone (they only wait to be reaped); this process is
    left out."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        fields = stat_fields(int(entry.name))
        if fields is None:
            continue
        pid, state, pgid = int(entry.name), fields[0], int(fields[2])
        if state not in ("Z", "X") and (pgid == group or owned_by(pid, mark)):
            found[pid] = pgid
    return found


def end_node(out: Path, group: int | None, grace: float) -> bool:
    """End the node's processes (see the module's ``stop``): SIGTERM to the launcher's process
    group ``group`` (None: not known to be the case's), up to ``grace`` seconds for the node to
    end, SIGKILL to what remains, up to KILL_WAIT seconds for that to vanish. Whether any
    process of the node was running."""
    running = node_processes(mark_of(out), group)
    if not running:
        return False
    if group in running.values():
        send(group, signal.SIGTERM, group=True)     # torchrun passes it on to its workers
    else:
        for pid in running:                         # no launcher known to pass it on
            send(pid, signal.SIGTERM)
    running = outlasting(out, group, grace)
    if running:
        if group in running.values():
            send(group, signal.SIGKILL, group=True)
        for pid in running:                         # the workers: sessions of their own
            send(pid, signal.SIGKILL)
        outlasting(out, group, KILL_WAIT)
    return True


def outlasting(out: Path, group: int | None, seconds: float) -> dict[int, int]:
    """The node's processes (see ``node_processes``) still running after up to ``seconds``."""
    running = {}

    def ended() -> bool:
        running.clear()
        running.update(node_processes(mark_of(out), group))
        return not running

    wait_until(ended, seconds)
    return running


def stop(args: argparse.Namespace) -> dict:
    out = Path(args.output_dir)
    try:
        return kill(out, args.grace)
    finally:
        (out / RESULT).unlink(missing_ok=True)


def kill(out: Path, grace: float) -> dict:
    """``stop``'s end of the node, then the wait for the supervisor's record."""
    try:
        group = int((out / PID).read_text().split()[1])
    except (OSError, ValueError, IndexError):
        group = None
    # The group is the case's while the supervisor runs and has not recorded the end (it has
    # not reaped the launcher: the id cannot be another's), or while its leader, the launcher,
    # carries the mark. Else only the mark tells (ids may have been reused).
    if not (supervisor_alive(out) and not (out / STATUS).exists()) and not owned_by(group, mark_of(out)):
        group = None
    if not end_node(out, group, grace):
        return {"changed": False, "msg": "not running"}
    wait_until(lambda: not supervisor_alive(out) or (out / STATUS).exists(), KILL_WAIT)
    return {"changed": True, "msg": "stopped"}


def wait(args: argparse.Namespace) -> dict:
    out = Path(args.output_dir)
    deadline = time.monotonic() + max(args.seconds, 0)
    while True:
        if (out / STATUS).exists():
            document = json.loads((out / STATUS).read_text(encoding="utf-8"))
            document["stdout"] = tail(out / LOG)
            try:
                document["result"] = json.loads((out / RESULT).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass                        # no result asked for, or none written (killed)
            return document
        if not supervisor_alive(out):
            # Written between the two checks, or the supervisor was killed without a word.
            if (out / STATUS).exists():
                continue
            return {"finished": 1, "rc": None, "timed_out": False, "stdout": tail(out / LOG),
                    "msg": "the case's supervisor is gone (killed, or never started)"}
        left = deadline - time.monotonic()
        if left <= 0:
            return {"finished": 0, "progress": progress(out)}
        time.sleep(min(0.2, left))


def progress(out: Path) -> dict:
    """Where rank 0 is, from the PerfLog lines in the last 8 KiB of its log: ``{"event" (the
    last), "epoch", "global_steps", "metrics": {name: value} (the last EVALUATE's), "time_ms"}``
    as far as they were written; ``{}`` before the first."""
    found: dict = {}
    for line in tail(out / RANK0_LOG, 8192).splitlines():
        at = line.find(PERFLOG)
        if at < 0:
            continue
        try:
            record = json.loads(line[at + len(PERFLOG):])
        except ValueError:
            continue                                    # the first line, cut by the tail
        if not isinstance(record, dict):
            continue
        value = record.get("value") if isinstance(record.get("value"), dict) else {}
        if record.get("event") == "EVALUATE":
            found["metrics"] = {k: v for k, v in value.items() if k not in ("epoch", "global_steps")
                                and isinstance(v, (int, float)) and not isinstance(v, bool)}
        for key in ("epoch", "global_steps"):
            if isinstance(value.get(key), int):
                found[key] = value[key]
        found["event"] = record.get("event")
        found["time_ms"] = (record.get("metadata") or {}).get("time_ms")
    return found


def tail(path: Path, size: int = 4096) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(path.stat().st_size - size, 0))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def main() -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    begin = sub.add_parser("start")
    begin.add_argument("--output-dir", required=True)
    begin.add_argument("--timeout", type=float, required=True)
    begin.add_argument("--stop-grace", type=float, default=10)
    begin.add_argument("--config-json")
    begin.add_argument("--input", action="store_true")
    begin.add_argument("--result", action="store_true")
    begin.add_argument("argv", nargs=argparse.REMAINDER)
    watch = sub.add_parser("wait")
    watch.add_argument("--output-dir", required=True)
    watch.add_argument("--seconds", type=float, default=10)
    end = sub.add_parser("stop")
    end.add_argument("--output-dir", required=True)
    end.add_argument("--grace", type=float, default=5)
    args = parser.parse_args()
    result = {"start": start, "wait": wait, "stop": stop}[args.action](args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
