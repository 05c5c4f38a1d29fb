#!/usr/bin/env python3
"""Measure the orchestration overhead of one case-round on 2, 8 and 32 loopback hosts.

    python bench/round_overhead.py [--hosts 2 8 32] [--runtimes none docker] [--repeat 3]
                                   [--clear-caches] [--state DIR]

Needs what the cluster tests need (root, ``sshd``, a running Docker engine; see
``tests/loopback_cluster.py``). For each host count N it starts N sshd hosts on loopback
(``FLAGPERF_LOOPBACK_PREFIX`` / ``FLAGPERF_LOOPBACK_PORT`` move them), and for each runtime runs
the diagnostic case ``sleep:pytorch:cpu:N:1:<repeat>`` (``launcher: python``, its standard 1 s
of "training", one process per host): ``playbooks/preflight.yml`` and ``playbooks/prepare.yml``
once, then each round alone, as the wrapper runs it: ``ansible-playbook playbooks/rounds.yml
-e flagperf_select=<case_id>/round<k>``, one process per round. Figures per round:

* ``step``: wall time of that ``rounds.yml`` process, start to exit (what a round costs);
* ``in-play``: ``round.json`` ``wall_time``, the round's first task to its last;
* ``e2e``: the case's own time, FINISHED ``e2e_time`` (the largest over the ranks);
* ``overhead = step - e2e`` (``in-play - e2e`` beside it), and per added host:
  ``(overhead(N) - overhead(2)) / (N - 2)``;
* ``ctl CPU``: CPU seconds of the controller side of the round (ansible-playbook, its
  workers, local module runs, ssh clients and ControlPersist masters), and its growth per
  added host (on a real cluster the hosts' own work runs on their own cores, so the
  controller's share is what grows with the host count);
* ``hosts CPU``: CPU seconds of the hosts' side, all hosts together (their sshd processes
  and what those ran: module runs, commands; not the detached case, monitor or containers);
  the CPU figures depend much less than the wall times on other load on the machine;
* ``machine CPU``: busy CPU seconds of the whole machine over the round (all cores: the
  controller, the hosts, and what neither tree holds: the Docker engine, the containers, the
  detached monitors and cases, async jobs), and its growth per added host: what each added
  host asks of the cores that the controller and every host share;
* ``tasks/host``: ok + failed tasks of one host in the play recap (set_fact and include
  tasks count, skipped ones do not): how many steps a host takes per round.

Each figure is the median over ``--repeat`` rounds. The "per added host" growth is taken
against the smallest host count measured. Beside them, a baseline on the same hosts
with the same ``ansible.cfg``: one ad-hoc ``ansible -m ansible.builtin.command -a true``, cold
(no ssh connection open) and warm (ControlPersist connections open; median of ``--repeat``).
All hosts share this machine's cores with the controller, so every figure includes the hosts'
own work; other load on the machine shows in the printed load average. It prints figures
only: nothing is asserted. ssh connections it opened and the sshd processes are stopped at the
end. Reference (DESIGN.md): FlagPerf's run.py sleeps 60 s per round by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

import loopback_cluster  # noqa: E402

RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=\d+\s+unreachable=\d+\s+"
                   r"failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)", re.M)


def ansible_env(control_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    # This benchmark's own ssh connections, so that it can close every one it opened.
    env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = str(control_dir)
    return env


def timed(argv: list[str], env: dict[str, str], timeout: int = 1800) -> tuple[float, str]:
    """Run ``argv`` in the checkout; (wall seconds, stdout). Raises on a non-zero exit."""
    begin = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    wall = time.monotonic() - begin
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} exited {done.returncode}:\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return wall, done.stdout


def tree_cpu(roots: list) -> float:
    """CPU seconds of ``roots`` and their descendants, with their reaped children."""
    import psutil

    total = 0.0
    for root in roots:
        try:
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system + times.children_user + times.children_system
    return total


def controller_cpu(control_dir: Path) -> float:
    """CPU seconds of this process's reaped children (ansible and its workers, local modules,
    ssh clients) and of the ControlPersist ssh masters (they detach, so are never reaped)."""
    import psutil

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    masters = [p for p in psutil.process_iter(["cmdline"])
               if any(str(control_dir) in a for a in p.info["cmdline"] or [])]
    return children.ru_utime + children.ru_stime + tree_cpu(masters)


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot, all cores: psutil's system-wide user,
    nice, system, irq and softirq times (Linux counts a guest's time in user already; idle,
    I/O wait and the time a hypervisor gave to others are not busy)."""
    import psutil

    times = psutil.cpu_times()
    return sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))


def hosts_cpu(cluster: loopback_cluster.Cluster) -> float:
    """CPU seconds of the cluster's sshd processes and what they ran and reaped (module
    runs, commands); detached processes (the monitor, async jobs, containers) are not in it."""
    import psutil

    return tree_cpu([psutil.Process(p.pid) for p in cluster.processes if p.poll() is None])


def close_connections(control_dir: Path) -> None:
    """End the ControlPersist ssh masters under ``control_dir`` (ssh -O exit)."""
    for socket_path in control_dir.glob("*"):
        subprocess.run(["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "unused"],
                       capture_output=True, timeout=30)


def host_base() -> Path:
    """This benchmark's folder on the hosts (its cluster's port in the name)."""
    home = Path(os.path.expanduser(f"~{loopback_cluster.USER}"))
    return home / "round-bench" / os.environ.get("FLAGPERF_LOOPBACK_PORT", "2222")


def stop_leftovers() -> None:
    """Monitors of an interrupted round (they run from this benchmark's host folder)."""
    import psutil

    for process in psutil.process_iter(["cmdline"]):
        if any(str(host_base()) in a for a in process.info["cmdline"] or []):
            process.kill()


def stop_cluster(cluster: loopback_cluster.Cluster, control_dir: Path) -> int:
    """Close the connections, stop the listeners and their sessions; sshd processes left."""
    import psutil

    sessions = cluster.sessions()
    close_connections(control_dir)
    cluster.stop()
    left = [p for p in sessions if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    return len(left) + sum(1 for p in cluster.processes if p.poll() is None)


def case_settings(hosts: int, runtime: str, repeat: int, clear_caches: bool) -> dict:
    base = host_base() / runtime
    return {
        "flagperf_container_runtime": runtime,
        # Own folders on the hosts: other checkouts may use the cluster user at the same time.
        "flagperf_root": str(base / "flagperf"),
        "flagperf_workdir": str(base / "work"),
        "flagperf_python": "/usr/bin/python3",
        "flagperf_clear_caches": clear_caches,
        "flagperf_cases": [f"sleep:pytorch:cpu:{hosts}:1:{repeat}"],
    }


def write_group_vars(inventory: Path, settings: dict) -> None:
    import yaml

    path = inventory / "group_vars" / "all.yml"
    current = yaml.safe_load(path.read_text())
    current.update(settings)
    path.write_text(yaml.safe_dump(current, sort_keys=False))


def recap_tasks(stdout: str) -> tuple[int, int]:
    """(ok + failed, skipped) tasks of the first benchmark host in the play recap."""
    for match in RECAP.finditer(stdout):
        if match["host"] != "localhost":
            return int(match["ok"]) + int(match["failed"]), int(match["skipped"])
    return 0, 0


def measure(cluster: loopback_cluster.Cluster, runtime: str, repeat: int, results: Path,
            env: dict[str, str], control_dir: Path, clear_caches: bool) -> dict:
    """Preflight and prepare once, then ``repeat`` rounds one process each; medians."""
    hosts = len(cluster.hosts)
    write_group_vars(cluster.inventory, case_settings(hosts, runtime, repeat, clear_caches))
    run_id = time.strftime("run%Y%m%d%H%M%S")
    common = ["-i", str(cluster.inventory), "-e", f"flagperf_results_dir={results}",
              "-e", f"flagperf_run_id={run_id}"]
    setup = 0.0
    for playbook in ("playbooks/preflight.yml", "playbooks/prepare.yml"):
        wall, _ = timed(["ansible-playbook", playbook, *common], env)
        setup += wall
    case_id = f"sleep-pytorch-cpux{hosts}x1"
    rows = []
    for number in range(1, repeat + 1):
        key = f"{case_id}/round{number}"
        load = os.getloadavg()[0]
        cpu = controller_cpu(control_dir), hosts_cpu(cluster), machine_cpu()
        wall, stdout = timed(["ansible-playbook", "playbooks/rounds.yml", *common,
                              "-e", f"flagperf_select={key}"], env)
        cpu = (controller_cpu(control_dir) - cpu[0], hosts_cpu(cluster) - cpu[1],
               machine_cpu() - cpu[2])
        document = json.loads((results / run_id / key / "round.json").read_text())
        if document["status"] != "passed":
            raise RuntimeError(f"{key}: {document['status']}: {document['reason']}")
        e2e = max(float(r["e2e_time"]) for r in document["ranks"].values() if r)
        tasks, skipped = recap_tasks(stdout)
        rows.append({"step": wall, "in_play": float(document["wall_time"]), "e2e": e2e,
                     "tasks": tasks, "skipped": skipped, "load": load,
                     "controller_cpu": cpu[0], "hosts_cpu": cpu[1], "machine_cpu": cpu[2]})
    median = {name: statistics.median(r[name] for r in rows) for name in rows[0]}
    median["overhead"] = statistics.median(r["step"] - r["e2e"] for r in rows)
    median["in_play_overhead"] = statistics.median(r["in_play"] - r["e2e"] for r in rows)
    median["setup"] = setup
    median["all_overheads"] = [r["step"] - r["e2e"] for r in rows]
    return median


def baseline(cluster: loopback_cluster.Cluster, control_dir: Path, repeat: int,
             env: dict[str, str]) -> tuple[float, float]:
    """One ad-hoc command task on every host: (cold s, warm s median)."""
    argv = ["ansible", "flagperf_hosts", "-i", str(cluster.inventory),
            "-m", "ansible.builtin.command", "-a", "true"]
    close_connections(control_dir)
    cold, _ = timed(argv, env)
    warm = [timed(argv, env)[0] for _ in range(repeat)]
    return cold, statistics.median(warm)


def print_table(figures: dict[tuple[int, str], dict]) -> None:
    header = (f"{'hosts':>5} {'runtime':<7} {'step s':>7} {'in-play s':>9} {'e2e s':>6} "
              f"{'overhead s':>10} {'in-play ovh':>11} {'per added host':>14} "
              f"{'ctl CPU s':>9} {'ctl CPU/added host':>18} {'hosts CPU s':>11} "
              f"{'machine CPU s':>13} {'machine CPU/added host':>22} {'tasks/host':>10} {'load':>5}")
    print(header)
    print("-" * len(header))
    for runtime in dict.fromkeys(r for _, r in figures):
        counts = sorted(h for h, r in figures if r == runtime)
        first = figures[(counts[0], runtime)]
        for hosts in counts:
            row = figures[(hosts, runtime)]
            added = hosts - counts[0]
            growth, ctl_growth, machine_growth = (
                "" if not added else f"{(row[name] - first[name]) / added:.2f}"
                for name in ("overhead", "controller_cpu", "machine_cpu"))
            print(f"{hosts:>5} {runtime:<7} {row['step']:>7.1f} {row['in_play']:>9.1f} "
                  f"{row['e2e']:>6.2f} {row['overhead']:>10.1f} {row['in_play_overhead']:>11.1f} "
                  f"{growth:>14} {row['controller_cpu']:>9.1f} {ctl_growth:>18} "
                  f"{row['hosts_cpu']:>11.1f} {row['machine_cpu']:>13.1f} {machine_growth:>22} "
                  f"{row['tasks']:>10.0f} {row['load']:>5.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--runtimes", nargs="+", choices=["none", "docker"],
                        default=["none", "docker"])
    parser.add_argument("--repeat", type=int, default=3, help="rounds (and baselines) each")
    parser.add_argument("--clear-caches", action="store_true",
                        help="leave flagperf_clear_caches on (a note per host: not root)")
    parser.add_argument("--state", type=Path, help="folder for keys, inventory and results "
                        "(default: a temporary one, removed at the end)")
    args = parser.parse_args()
    # A terminated benchmark still stops its hosts and connections (the finally below).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    missing = loopback_cluster.problems()
    if missing:
        print("cannot start the cluster: " + "; ".join(missing), file=sys.stderr)
        return 2
    state = args.state or Path(tempfile.mkdtemp(prefix="round-bench-"))
    # Short: the ssh control sockets live here (a socket path has at most 107 bytes).
    control_dir = Path(tempfile.mkdtemp(prefix="rb-cp-"))
    env = ansible_env(control_dir)
    print(f"host: {os.cpu_count()} logical CPUs, load {os.getloadavg()[0]:.2f}; "
          f"{args.repeat} rounds per row; case sleep:pytorch (1 s, launcher python)")
    figures: dict[tuple[int, str], dict] = {}
    baselines: dict[int, tuple[float, float]] = {}
    left = 0
    try:
        for hosts in args.hosts:
            cluster = loopback_cluster.start(state / f"hosts{hosts}", hosts)
            try:
                for runtime in args.runtimes:
                    row = measure(cluster, runtime, args.repeat, state / "results", env,
                                  control_dir, args.clear_caches)
                    figures[(hosts, runtime)] = row
                    print(f"  {hosts:>3} hosts {runtime:<6}: overhead "
                          + " ".join(f"{v:.1f}" for v in row["all_overheads"])
                          + f" s (prepare+preflight {row['setup']:.0f} s)", flush=True)
                baselines[hosts] = baseline(cluster, control_dir, args.repeat, env)
            finally:
                left += stop_cluster(cluster, control_dir)
    finally:
        stop_leftovers()
        shutil.rmtree(control_dir, ignore_errors=True)
        shutil.rmtree(host_base(), ignore_errors=True)
        if args.state is None:
            shutil.rmtree(state, ignore_errors=True)

    print()
    print_table(figures)
    print()
    print(f"{'hosts':>5} {'ad-hoc command cold s':>22} {'warm s':>7}")
    for hosts, (cold, warm) in sorted(baselines.items()):
        print(f"{hosts:>5} {cold:>22.1f} {warm:>7.1f}")
    print(f"sshd processes left after stopping: {left}")
    print("targets (issue): 2-host overhead <= 6 s, <= 0.5 s more per added host")
    return 0


if __name__ == "__main__":
    sys.exit(main())
