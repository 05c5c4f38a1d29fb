"""Wait for one node of a round, in a flat loop of wait slices: the launch role's wait.

Each slice is one ssh exchange: the launch role's ``flagperf_host.node_job wait`` run by the
host's Python (``flagperf_ansible.run.host_steps``), which blocks on the host for up to
``slice`` seconds (no traffic meanwhile) and reports whether the node ended. The loop is plain Python in this action, so slice 5000 costs what
slice 5 does and a round may last a day (``timeout: 86400``) at any slice. Between slices the
wait reads the round's board on the controller (``flagperf_ansible.run.round_wait.RoundBoard``):
every node of a round is waited for at once, one fork of ``ansible-playbook`` per host, and a
node that failed, or a host that was lost, ends the other nodes' waits within about one slice.
The caller then stops what still runs (the launch role's stop).

Options:

* ``output_dir`` (required): the node's folder on the host (``flagperf_host.node_job start``'s);
* ``executable`` (default ``python3``): the host's Python;
* ``slice`` (seconds, default 10): how long one exchange waits on the host;
* ``timeout`` (seconds, required): the case timeout. The host kills the node then; the wait
  gives up ``grace`` seconds (default 30) later (``deadline_passed``), should the host's word
  never come;
* ``round_id`` (default ``""``: a node alone): the round's start, shared by its nodes (e.g.
  ``<case_id>/round<k>@<started_ms>``): its nodes publish how they ended and read their peers';
* ``publish`` (``failed``, with ``round_id``): wait for nothing, only tell the round's other
  nodes that this one failed (a round's rescue, when a task failed on this host before or
  during its wait: its peers must not wait for it until the timeout);
* ``job_dir`` (instead of ``output_dir``; backend slurm): wait for a round's Slurm job on its
  submit host, each slice ``flagperf_host.slurm_job wait`` there, which asks Slurm and reads
  the job's records. While the job waits in the queue it is shown as waiting (``flagperf-progress:
  <host>: job 42 waiting in the queue (Resources), 1 min in``), and the queue time is not the
  round's: ``timeout`` counts from the job's start. ``node`` is then the job's report
  (``state``, ``nodes``, ``queued_s``, ...).

While the node runs, where rank 0 is (its epoch, step and last evaluation, from its PerfLog
lines) is shown as one line per new epoch or evaluation, or per minute at most, ``flagperf-progress: <host>: epoch 3, step 132, acc1
49.44; 1 min 40 s in, at most 2 min left``, which the wrapper's progress bar takes; the time
left is estimated where the play's round (``flagperf_round``) plans a number of epochs (a case
that reaches its target stops earlier, hence "at most").

Returns ``node`` (``flagperf_host.node_job wait``'s last report: ``finished``, ``rc``, ``timed_out``,
``msg``, ``stdout``, and ``result``, a supervised module's), ``slices`` (exchanges made),
``stopped_by`` (the peer whose node failed or whose host was lost, when that ended the wait)
and ``deadline_passed``. Never ``failed`` for a node that failed: that is a result to record.
A connection lost mid-wait makes the host unreachable, as any task would, after telling the
peers. Check mode runs nothing (``skipped``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

try:
    import flagperf_ansible  # noqa: F401
except ImportError:  # running from a checkout without `pip install`: src/ beside plugins/
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ansible import constants as C
from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from flagperf_ansible.results.overview import duration_text
from flagperf_ansible.run.host_steps import Step, exchange
from flagperf_ansible.run.round_wait import RoundBoard, job_status, node_failed

# The launch role's host side, and the slurm_job role's: the host package's entry modules.
NODE_JOB = "flagperf_host.node_job"
SLURM_JOB = "flagperf_host.slurm_job"


class ActionModule(ActionBase):
    # Nothing goes through a temporary folder on the host: no exchange to make or remove one.
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("output_dir", "job_dir", "executable", "slice", "timeout", "grace",
                             "round_id", "publish"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        output_dir = to_text(args.get("output_dir") or "")
        job_dir = to_text(args.get("job_dir") or "")
        if bool(output_dir) == bool(job_dir):
            raise AnsibleActionFail("give output_dir (a node), or job_dir (a Slurm job)")
        try:
            slice_s = float(args.get("slice", 10))
            timeout = float(args["timeout"])
            grace = float(args.get("grace", 30))
        except (KeyError, TypeError, ValueError):
            raise AnsibleActionFail("timeout (required), slice and grace must be numbers of seconds") from None
        if slice_s <= 0 or timeout <= 0:
            raise AnsibleActionFail("slice and timeout must be positive")
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: nothing waited for")
            return result
        round_id = to_text(args.get("round_id") or "")
        board = RoundBoard(C.DEFAULT_LOCAL_TMP, round_id) if round_id else None
        host = task_vars.get("inventory_hostname", "")
        if args.get("publish"):
            if board is None or args["publish"] != "failed":
                raise AnsibleActionFail("publish takes failed, with a round_id")
            board.publish(host, "failed")
            result.update(changed=False, msg="told the round's other nodes that this one failed")
            return result
        executable = to_text(args.get("executable") or "python3")

        deadline = time.monotonic() + timeout + grace
        began = time.monotonic()
        epochs = planned_epochs(task_vars.get("flagperf_round"))
        shown, shown_at = None, 0.0
        slices, node, stopped_by = 0, {"finished": 0}, None
        queued = bool(job_dir)          # a job's time counts once it runs
        while True:
            seconds = max(min(slice_s, deadline - time.monotonic()), 0)
            command, data = exchange(executable, [
                Step(module=SLURM_JOB, argv=["wait", "--job-dir", job_dir, "--seconds", f"{seconds:.3f}"])
                if job_dir else
                Step(module=NODE_JOB, argv=["wait", "--output-dir", output_dir, "--seconds", f"{seconds:.3f}"])])
            try:
                done = self._low_level_execute_command(command, in_data=data, sudoable=False)
            except AnsibleConnectionFailure:
                if board is not None:
                    board.publish(host, "lost")
                raise
            slices += 1
            node = dict(job_status({"rc": done["rc"], "stdout": to_text(done.get("stdout")),
                                    "stderr": to_text(done.get("stderr"))}))
            if node.get("finished"):
                if board is not None:
                    board.publish(host, "failed" if node_failed(node) else "ended")
                break
            if queued:
                if node.get("started_ms") is None:
                    # Waiting in the queue: shown so, and the round's timeout does not run.
                    deadline = time.monotonic() + timeout + grace
                    line = (f"job {node.get('job_id')} waiting in the queue ({node.get('reason') or node.get('state')}), "
                            f"{duration_text(node.get('queued_s') or 0)} in")
                    if time.monotonic() - shown_at >= 60 or shown is None:
                        shown, shown_at = (), time.monotonic()
                        self._display.display(f"flagperf-progress: {host}: {line}")
                    continue
                queued, began = False, time.monotonic()
                deadline = began + timeout + grace
                self._display.display(f"flagperf-progress: {host}: job {node.get('job_id')} running on "
                                      f"{node.get('nodelist')} after {duration_text(node.get('queued_s') or 0)} "
                                      "in the queue")
            where = node.get("progress") or {}
            line = progress_line(where, time.monotonic() - began, epochs)
            # A line per new epoch or evaluation, else one a minute at most.
            key = (where.get("epoch"), json.dumps(where.get("metrics"), sort_keys=True))
            if line and (key != shown or time.monotonic() - shown_at >= 60):
                shown, shown_at = key, time.monotonic()
                self._display.display(f"flagperf-progress: {host}: {line}")
            stopped_by = board.stopping_peer(host) if board is not None else None
            if stopped_by is not None or time.monotonic() >= deadline:
                break
        result.update(changed=False, failed=False, node=node, slices=slices, stopped_by=stopped_by,
                      deadline_passed=not node.get("finished") and stopped_by is None)
        # The node's own words, for a reader of the task's output.
        result["msg"] = json.dumps({k: node.get(k) for k in ("finished", "rc", "timed_out", "msg")})
        return result


def planned_epochs(round_: object) -> int | None:
    """The epochs a plan round's configuration plans (``epochs``, ``max_epochs``), or None."""
    config = round_.get("config") if isinstance(round_, dict) else None
    for key in ("epochs", "max_epochs"):
        value = (config or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def progress_line(progress: dict, elapsed_s: float, epochs: int | None) -> str:
    """``epoch 3, step 132, acc1 49.44; 1 min 40 s in, at most 2 min 30 s left`` from
    ``flagperf_host.node_job wait``'s ``progress``; ``""`` before rank 0's first PerfLog line with an
    epoch or a step. The time left: the elapsed time per finished epoch times the epochs
    still planned (an epoch is finished once evaluated or ended)."""
    parts = []
    if "epoch" in progress:
        parts.append(f"epoch {progress['epoch']}" + (f"/{epochs}" if epochs else ""))
    if "global_steps" in progress:
        parts.append(f"step {progress['global_steps']}")
    if not parts:
        return ""
    parts += [f"{name} {value:.4g}" for name, value in (progress.get("metrics") or {}).items()]
    timing = f"{duration_text(elapsed_s)} in"
    done = progress.get("epoch", 0) - (progress.get("event") not in ("EVALUATE", "EPOCH_END"))
    if epochs and done > 0:
        timing += f", at most {duration_text(elapsed_s / done * max(epochs - done, 0))} left"
    return ", ".join(parts) + "; " + timing
