"""A round as one Slurm job (backend slurm): submitted, waited for and ended on the submit host
(the slurm_job role, through ``flagperf.benchmark.piped_script`` and ``node_wait``), and its
batch step, which runs every node's part (``slurm_node``).

    flagperf_host.slurm_job submit --job-dir DIR --python PY -- SBATCH_ARGV...
    flagperf_host.slurm_job wait --job-dir DIR --seconds S
    flagperf_host.slurm_job end --job-dir DIR [--grace S]
    python3 DIR/.flagperf_slurm/flagperf_host.zip slurm_job batch --job-dir DIR
    flagperf_host.slurm_job check --nodes N [--partition P]

``submit`` reads the job's definition (JSON: ``name``, ``nodes``: each node's ``dir``, ``start``
and ``end`` steps; ``wait_slice``, ``clear_caches``; see ``slurm_node``) on its standard input and
writes it to ``DIR/.flagperf_slurm/job.json`` (the ssh user's alone: the steps hold the case's
environment), with this package as a runnable archive (``flagperf_host.zip``: ``python3
flagperf_host.zip <entry module> ARGS`` runs it) and ``batch.sh``, then runs ``SBATCH_ARGV
batch.sh`` there (``sbatch --parsable``) and records the job's id. Prints ``{"changed",
"job_id", "msg"}``; exits 1 when sbatch refused (its words in ``msg``).

``wait`` reports on the job for up to S seconds: at once when it has ended (left the running
states: it is completing or done), else after S seconds. Slurm is asked every ``SLURM_POLL``
seconds (``scontrol show job``: without accounting ``sacct`` fails, and a job is forgotten
``MinJobAge`` seconds after its end: then the job's own records say how it ended). Prints the
job's report (``report``): ``finished`` 0 while it is queued or running, with ``progress``
(rank 0's, from its log, as ``node_job wait`` gives it) once it runs.

``end`` cancels the job unless it has ended (``scancel``: SIGTERM to every node's step, which
stops its node and keeps what it wrote), also one that is still queued or whose id was never
recorded (by its name), waits up to ``--grace`` seconds (default 120) until Slurm no longer
holds it (its epilog done: ``squeue`` shows nothing of it), and prints its final report with
``cancelled``.

``batch`` is the job's batch script's one command, on its first node: it records the job's
start and nodes, runs ``slurm_node`` on every node (``srun --ntasks-per-node=1
--kill-on-bad-exit=1``: a node that fails ends the others' steps), records the end and exits
with srun's status.

``check`` (preflight) prints one line per problem and exits 1 when there is one: no ``sbatch``
here, no such partition (``""``: the cluster's default), a partition that is not up, or fewer
nodes in it than the rounds need (N).

The report: ``{"job_id", "name", "state" (Slurm's JobState, or the job's own word once Slurm has
forgotten it), "reason", "exit_code", "partition", "nodelist", "finished", "submitted_ms",
"started_ms" (the batch step's start: the round begins there; queue time is not the round's),
"ended_ms", "queued_s", "nodes": [each node's record (slurm_node), "lost" where it left none
and Slurm holds the node down or not responding, or the job ended without it]}``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import flagperf_host
from flagperf_host.node_job import progress
from flagperf_host.process import now_ms, write_json
from flagperf_host.slurm_node import ARCHIVE, SPEC, STATE_DIR, node_record

PROG = "slurm_job"
JOB_ID = "job_id"
SUBMITTED = "submitted.json"
BATCH_START = "batch.json"
BATCH_END = "batch_end.json"
BATCH_SCRIPT = "batch.sh"
SLURM_POLL = 2.0             # seconds between questions to slurmctld while a job runs
FILE_POLL = 0.2              # seconds between looks at the job's own records
#: States in which the job's steps still run (or will): anything else has ended.
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
          "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "SPECIAL_EXIT",
          "UNREACHABLE"}
#: A node in these states (sinfo's long names, any flag) is gone for its jobs.
NODE_GONE = re.compile(r"DOWN|NOT_RESPONDING|FAIL|NO_RESPOND|\*")
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z/:_]*)=")


def package_archive() -> bytes:
    """This package as a runnable zip (``__main__.py`` runs the entry module named by the first
    argument): the archive it was loaded from, with that file added; built from its folder when
    it was loaded from one."""
    # Not resolved: loaded from the exchange's archive, the path is /dev/fd/N/flagperf_host.
    root = Path(flagperf_host.__file__).parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        source = root.parent
        if source.is_file() or not root.is_dir():       # loaded from an archive
            with zipfile.ZipFile(str(source)) as loaded:
                for name in loaded.namelist():
                    if name.startswith(f"{root.name}/") and name.endswith(".py"):
                        bundle.writestr(name, loaded.read(name))
        else:
            for path in sorted(root.rglob("*.py")):
                if "__pycache__" not in path.parts:
                    bundle.write(path, f"{root.name}/{path.relative_to(root).as_posix()}")
        bundle.writestr("__main__.py", (
            "import runpy, sys\n"
            f"runpy.run_module('{root.name}.' + sys.argv.pop(1), run_name='__main__', "
            "alter_sys=True)\n"))
    return buffer.getvalue()


def slurm(*argv: str, check: bool = False) -> subprocess.CompletedProcess:
    """A Slurm client command (its output as text); a missing command is rc 127."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=check)
    except FileNotFoundError as err:
        return subprocess.CompletedProcess(argv, 127, "", str(err))


def parse_show(line: str) -> dict[str, str]:
    """``scontrol show ... -o``'s one line as ``{key: value}`` (a value may hold spaces)."""
    found = list(_FIELD.finditer(line))
    return {m.group(1): line[m.end():found[i + 1].start() if i + 1 < len(found) else None].strip()
            for i, m in enumerate(found)}


def read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


class Job:
    """A round's job, from its folder on the submit host."""

    def __init__(self, job_dir: Path) -> None:
        self.dir = job_dir
        self.state_dir = job_dir / STATE_DIR
        self.spec = read(self.state_dir / SPEC)
        self.submitted = read(self.state_dir / SUBMITTED)
        self.slurm: dict[str, str] = {}
        self.forgotten = False

    @property
    def id(self) -> str:
        return str(self.submitted.get("job_id") or "")

    def ask(self) -> dict[str, str]:
        """What slurmctld holds of the job (``scontrol show job``): {} once it has forgotten it
        (``forgotten``); what it said last while it does not answer."""
        if self.id:
            done = slurm("scontrol", "show", "job", "-o", self.id)
            if done.returncode == 0 and done.stdout.strip():
                self.slurm, self.forgotten = parse_show(done.stdout.strip().splitlines()[0]), False
            elif "Invalid job id" in done.stderr:
                self.slurm, self.forgotten = {}, True
        return self.slurm

    def state(self) -> str:
        """Slurm's JobState while it holds the job; once it forgot it, the job's own word
        (``COMPLETED`` or ``FAILED`` by the batch step's status, ``UNKNOWN`` without one);
        ``NOT_SUBMITTED``; ``UNREACHABLE`` (an active state) while slurmctld has not answered."""
        if self.slurm.get("JobState"):
            return self.slurm["JobState"]
        end = read(self.state_dir / BATCH_END)
        if end:
            return "COMPLETED" if end.get("rc") == 0 else "FAILED"
        if not self.id:
            return "NOT_SUBMITTED"
        return "UNKNOWN" if self.forgotten else "UNREACHABLE"

    def active(self) -> bool:
        """Whether the job's steps run or will (queued, or Slurm has not said)."""
        return self.state() in ACTIVE

    def held(self) -> list[str]:
        """The ids of this round's jobs slurmctld still holds, by name, of this user
        (completing ones included)."""
        name = self.spec.get("name") or self.submitted.get("name")
        if not name:
            return [self.id] if self.id else []
        listed = slurm("squeue", "-h", "-u", str(os.getuid()), "-n", name, "-o", "%i")
        return listed.stdout.split()

    def report(self) -> dict:
        state = self.state()
        batch, end = read(self.state_dir / BATCH_START), read(self.state_dir / BATCH_END)
        submitted = self.submitted.get("submitted_ms")
        started = batch.get("started_ms")
        ended = end.get("ended_ms")
        finished = state not in ACTIVE
        document = {
            "job_id": self.id, "name": self.spec.get("name", ""), "state": state,
            "reason": self.slurm.get("Reason", ""), "exit_code": self.slurm.get("ExitCode", "")
            or (f"{end['rc']}:0" if "rc" in end else ""),
            "partition": self.slurm.get("Partition", "") or self.spec.get("partition", ""),
            "nodelist": self.slurm.get("NodeList", "") or batch.get("nodelist", ""),
            "finished": int(finished), "submitted_ms": submitted, "started_ms": started,
            "ended_ms": ended if ended else (now_ms() if finished and started else None),
        }
        if submitted:
            document["queued_s"] = round(((started or now_ms()) - submitted) / 1000.0, 3)
        document["nodes"] = self.node_records(finished, bool(started))
        if not finished and started:
            first = next((n for n in document["nodes"] if n.get("noderank") == 0), None)
            if first and first.get("dir"):
                document["progress"] = progress(self.dir / first["dir"])
        return document

    def node_records(self, finished: bool, started: bool) -> list[dict]:
        """Each node's record (``slurm_node``); once the job has ended, a node that left no end
        record is ``lost`` (Slurm holds it down or not responding, or the job ended without
        it), one that never wrote any is listed by its name when Slurm said which it was."""
        count = len(self.spec.get("nodes") or [])
        names = []
        if finished and self.slurm.get("NodeList"):
            names = slurm("scontrol", "show", "hostnames", self.slurm["NodeList"]).stdout.split()
        gone = self.gone_nodes() if finished and started else set()
        records = []
        for noderank in range(count):
            record = read(node_record(self.state_dir, noderank))
            if not record and not started:
                continue
            record.setdefault("noderank", noderank)
            if not record.get("host") and noderank < len(names):
                record["host"] = names[noderank]
            if finished and "node" not in record:
                record["lost"] = True
                record["lost_reason"] = ("Slurm holds the node down or not responding"
                                         if record.get("host") in gone
                                         else "the node's step ended without a word")
            records.append(record)
        return records

    def gone_nodes(self) -> set[str]:
        nodelist = self.slurm.get("NodeList")
        if not nodelist:
            return set()
        listed = slurm("sinfo", "-h", "-N", "-n", nodelist, "-o", "%N|%T").stdout
        return {name for name, _, state in (line.partition("|") for line in listed.split())
                if NODE_GONE.search(state.upper())}


def submit(args: argparse.Namespace) -> int:
    job = Job(args.job_dir)
    if job.id and job.ask() and job.active():
        print(json.dumps({"changed": False, "job_id": job.id,
                          "msg": f"job {job.id} of this round is still queued or running"}))
        return 0
    spec = json.loads(sys.stdin.read())
    job.state_dir.mkdir(parents=True, exist_ok=True)
    job.state_dir.chmod(0o700)
    for name in os.listdir(job.state_dir):
        (job.state_dir / name).unlink()
    # The folder is the user's alone (the steps hold the case's environment); the job keeps
    # this process's umask (sbatch passes it on), as a round over ssh does.
    write_json(job.state_dir / SPEC, spec)
    (job.state_dir / ARCHIVE).write_bytes(package_archive())
    script = job.state_dir / BATCH_SCRIPT
    script.write_text(
        "#!/bin/sh\n"
        f"# flagperf-ansible: {spec.get('name', '')}, one task per node (flagperf_host.slurm_node)\n"
        f"exec {shlex.quote(args.python)} {shlex.quote(str(job.state_dir / ARCHIVE))} "
        f"{PROG} batch --job-dir {shlex.quote(str(args.job_dir))}\n", encoding="utf-8")
    script.chmod(0o700)
    submitted = now_ms()
    argv = args.sbatch[1:] if args.sbatch[:1] == ["--"] else args.sbatch
    done = slurm(*argv, str(script))
    if done.returncode != 0:
        print(json.dumps({"failed": True, "msg": (done.stderr or done.stdout).strip()
                          or f"sbatch exited {done.returncode}"}))
        return 1
    job_id = done.stdout.strip().split(";")[0]
    write_json(job.state_dir / SUBMITTED, {"job_id": job_id, "name": spec.get("name", ""),
                                           "submitted_ms": submitted})
    print(json.dumps({"changed": True, "job_id": job_id, "msg": f"submitted job {job_id}"}))
    return 0


def wait(args: argparse.Namespace) -> int:
    job = Job(args.job_dir)
    deadline = time.monotonic() + max(args.seconds, 0)
    asked = 0.0
    while True:
        if time.monotonic() - asked >= SLURM_POLL or (job.state_dir / BATCH_END).exists():
            job.ask()
            asked = time.monotonic()
            if not job.active():
                break
        if time.monotonic() >= deadline:
            break
        time.sleep(min(FILE_POLL, max(deadline - time.monotonic(), 0)))
    print(json.dumps(job.report()))
    return 0


def end(args: argparse.Namespace) -> int:
    job = Job(args.job_dir)
    job.ask()
    held = job.held()
    cancelled = False
    if held and (job.active() or not job.id):
        slurm("scancel", *held)
        cancelled = True
    deadline = time.monotonic() + args.grace
    while job.held() and time.monotonic() < deadline:
        time.sleep(0.5)
    job.ask()
    document = job.report()
    document["cancelled"] = cancelled
    left = job.held()
    if left:
        document["msg"] = f"Slurm still holds job {', '.join(left)} after {args.grace:g} s"
    print(json.dumps(document))
    return 0


def batch(args: argparse.Namespace) -> int:
    """The job's batch step (see the module's ``batch``)."""
    state = args.job_dir / STATE_DIR
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    write_json(state / BATCH_START, {"started_ms": now_ms(), "nodelist": nodelist,
                                     "batch_host": os.environ.get("SLURMD_NODENAME", "")})
    # scancel's SIGTERM reaches srun too: this step waits for srun to end the nodes' steps.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    archive = state / ARCHIVE
    argv = ["srun", "--ntasks-per-node=1", f"--nodes={os.environ.get('SLURM_JOB_NUM_NODES', '1')}",
            "--kill-on-bad-exit=1", "--label", sys.executable, str(archive), "slurm_node",
            "--job-dir", str(args.job_dir)]
    try:
        rc = subprocess.run(argv, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)).returncode
    except OSError as err:
        print(f"{PROG}: cannot run srun: {err}", file=sys.stderr)
        rc = 127
    write_json(state / BATCH_END, {"ended_ms": now_ms(), "rc": rc})
    return rc if 0 <= rc < 256 else 1


def check(args: argparse.Namespace) -> int:
    """The preflight's look at the cluster (see the module's ``check``)."""
    import shutil

    problems = []
    if shutil.which("sbatch") is None:
        problems.append("no sbatch on PATH (slurm-client)")
    listed = slurm("sinfo", "-h", "-o", "%P|%a|%D")
    if listed.returncode != 0:
        problems.append(f"sinfo: {(listed.stderr or listed.stdout).strip() or listed.returncode}")
    else:
        partitions = {}
        for line in listed.stdout.split():
            name, up, count = (line.split("|") + ["", ""])[:3]
            default = name.endswith("*")
            entry = partitions.setdefault(name.rstrip("*"), {"up": up, "nodes": 0, "default": default})
            entry["nodes"] += int(count) if count.isdigit() else 0
        wanted = args.partition or next((n for n, e in partitions.items() if e["default"]), "")
        shown = f"partition {wanted}" if args.partition else f"the default partition ({wanted or 'none'})"
        if wanted not in partitions:
            problems.append(f"{shown} does not exist (sinfo lists {', '.join(sorted(partitions)) or 'none'})")
        elif partitions[wanted]["up"] != "up":
            problems.append(f"{shown} is {partitions[wanted]['up']}")
        elif partitions[wanted]["nodes"] < args.nodes:
            problems.append(f"{shown} has {partitions[wanted]['nodes']} node(s); the cases need {args.nodes}")
    for line in problems:
        print(line)
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    begin = sub.add_parser("submit")
    begin.add_argument("--job-dir", required=True, type=Path)
    begin.add_argument("--python", default="python3")
    begin.add_argument("sbatch", nargs=argparse.REMAINDER)
    watch = sub.add_parser("wait")
    watch.add_argument("--job-dir", required=True, type=Path)
    watch.add_argument("--seconds", type=float, default=10)
    stop = sub.add_parser("end")
    stop.add_argument("--job-dir", required=True, type=Path)
    stop.add_argument("--grace", type=float, default=120)
    run = sub.add_parser("batch")
    run.add_argument("--job-dir", required=True, type=Path)
    look = sub.add_parser("check")
    look.add_argument("--nodes", type=int, default=1)
    look.add_argument("--partition", default="")
    args = parser.parse_args()
    return {"submit": submit, "wait": wait, "end": end, "batch": batch, "check": check}[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
