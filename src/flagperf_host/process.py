"""Process control on a host (Linux; standard library only): detached daemons, liveness by pid
and start time, signals to a process or its group, reaping, atomic files.

Shared by the node job (``node_job``, a round's case processes) and the monitor
(``sys_monitor``). Both are started by a step that ``piped_script`` runs over ssh, so both
detach: the exchange ends only when every copy of its standard streams is closed.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path
from typing import Callable

PR_SET_CHILD_SUBREAPER = 36        # prctl(2), Linux 3.4+
POLL = 0.1                         # seconds between looks at processes that should end


def now_ms() -> int:
    """Wall clock in epoch milliseconds (PerfLog ``time_ms``'s clock)."""
    return int(time.time() * 1000)


def write_json(path: Path, document: dict, indent: int | None = None) -> None:
    """Write ``document`` to ``path`` atomically (a reader never sees half of it).

    Raises:
        OSError: the folder cannot be written.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document, indent=indent, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def name_process(name: str) -> None:
    """This process's name as ps -C, pgrep and psutil's name() show it (Linux; at most 15
    bytes). A process forked from a step run with others in one interpreter keeps that
    interpreter's command line; its name tells what it is."""
    try:
        with open("/proc/self/comm", "w", encoding="ascii") as handle:
            handle.write(name[:15])
    except OSError:
        pass


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (state first, process group at index 2,
    start time at index 19: field 22, clock ticks after boot; proc(5)); None when unreadable."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """Process ``pid``'s start time (clock ticks after boot), None when unknown: with the pid,
    it tells a process from a later one that got the same pid."""
    fields = stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def alive(pid: int | None, started: str | None = None) -> bool:
    """Whether ``pid`` runs: not gone, not a zombie (ended, not yet reaped), and, when
    ``started`` is given, the same process as then (its start time), not a reused pid."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not Path(f"/proc/{pid}").is_dir():
        return True  # no procfs: trust the signal check
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20:
        return False
    return fields[0] != "Z" and (started is None or fields[19] == started)


def read_pid_file(path: Path) -> tuple[int | None, str | None]:
    """A pid file's ``PID START_TIME`` (``write_pid_file``); (None, None) when unreadable, the
    start time None when not recorded."""
    try:
        words = path.read_text().split()
        return int(words[0]), (words[1] if len(words) > 1 else None)
    except (OSError, ValueError, IndexError):
        return None, None


def write_pid_file(path: Path) -> None:
    """Record this process and its start time, atomically: a later process with the same pid
    is not it. (The command line cannot tell: every step runs as ``python3 -c <runner>``.)"""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{os.getpid()} {start_time(os.getpid()) or ''}\n")
    os.replace(tmp, path)


def send(pid: int, sig: int, group: bool = False) -> None:
    """Signal ``sig`` to process ``pid`` (or to process group ``pid``); nothing when it ended
    meanwhile or is not ours."""
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def detach(name: str, run: Callable[[], int | None], log: Path | None = None,
           keep_stdin: bool = False) -> None:
    """Run ``run()`` in a daemon and return at once: a grandchild in a session of its own (no
    longer the ssh session's), named ``name`` (``name_process``), with standard output and
    error appended to ``log`` (else the null device) and standard input the null device (or,
    with ``keep_stdin``, this process's). The daemon ends by ``os._exit`` with what ``run``
    returns (1 and a traceback on its standard error when it raises), never returning here.
    """
    first = os.fork()
    if first:
        os.waitpid(first, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        name_process(name)
        devnull = os.open(os.devnull, os.O_RDWR)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if log else devnull
        if not keep_stdin:
            os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
    except BaseException:
        os._exit(1)
    code = 1
    try:
        code = run() or 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def wait_until(done: Callable[[], bool], seconds: float, poll: float = POLL) -> bool:
    """Look at ``done()`` every ``poll`` seconds for up to ``seconds``; whether it came true."""
    deadline = time.monotonic() + max(seconds, 0)
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def become_subreaper() -> None:
    """Orphans of this process's descendants (torchrun's workers when torchrun dies first)
    become this process's children instead of init's: reaped here (``reap``)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:       # no ctypes or no prctl: orphans go to init
        pass


def reap(pid: int, deadline: float) -> int | None:
    """Reap this process's children until ``pid`` ended (its exit code, -N for signal N) or
    ``deadline`` (time.monotonic()) passed (None)."""
    while True:
        try:
            done, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return None
        if done == pid:
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if done == 0:
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL)
