"""The wrapper: runs the playbooks through ansible-runner one step at a time.

Steps: ``playbooks/preflight.yml``, ``playbooks/prepare.yml``, then ``playbooks/rounds.yml`` once per case round
(``flagperf_select``), then ``playbooks/report.yml``: the same playbooks ``site.yml`` imports,
so both entry points write the same results. A rich progress bar shows the case, round and
current task.

Ctrl-C or SIGTERM is passed on to the step's ansible-playbook as SIGTERM, so that an
interrupt takes the one path it takes without the wrapper: the results callback stops the
round in flight on its hosts (``playbooks/cleanup.yml``: containers, processes, monitors),
fetches what it wrote and records it as ``interrupted``; the wrapper then runs the report,
whose play writes the summary of what ran (the callback is the summary's one writer). A
second Ctrl-C gives up: the step's processes are killed. ``retries`` re-runs a round that did not
pass, keeping the failed attempt under ``<round>/attempts/<n>/``; ``resume`` continues a run
folder, running only the rounds that have not passed.

A step that fails prints, per host, why: each failed item's own message for a looped task, the
output's last lines where the message says nothing more than that a command failed; the whole
Ansible output of that step is kept in ``<run_dir>/ansible/<step>.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.config.inventory import read_inventory
from flagperf_ansible.results.layout import PLAN_FILE, REPORT_STEP_FOLLOWS_ENV, SUMMARY_JSON, \
    keep_attempt, mark_interrupted, read_json, read_optional, round_status_of
from flagperf_ansible.run.plan import build_plan
from flagperf_ansible.results.provenance import COMMAND_ENV

#: Where a failed step's whole Ansible output is kept, under the run folder.
ANSIBLE_LOG_DIR = "ansible"
#: Messages that only say that something failed: the output says why.
_GENERIC_MSGS = {"", "non-zero return code", "one or more items failed", "failed"}
#: Output lines shown when the message says nothing more.
_TAIL_LINES = 3
#: Failure lines printed per step; the step's log has the rest.
_SHOWN_FAILURES = 10


def failure_lines(data: dict[str, Any]) -> list[str]:
    """What went wrong, from the ``event_data`` of an ansible-runner ``runner_on_failed`` or
    ``runner_on_unreachable`` event: one line per failed item of a looped task (its
    ``res.results``), ``<host>: item <label>: <why>``; else one, ``<host>: <why>``.

    ``<why>`` is the result's ``msg``; where that is empty or only says that something failed
    ("non-zero return code", "MODULE FAILURE"), it is followed by the return code and the last
    lines of ``stderr`` (else ``stdout``, ``module_stderr``, ``module_stdout``). A line may
    span several lines (a multi-line message or output tail).
    """
    host = data.get("host") or "?"
    res = data.get("res") or {}
    items = res.get("results") if isinstance(res, dict) else None
    if isinstance(items, list):
        failed = [r for r in items if isinstance(r, dict) and r.get("failed")]
        if failed:
            return [f"{host}: item {_item_label(r)}: {_why(r)}" for r in failed]
    return [f"{host}: {_why(res if isinstance(res, dict) else {'msg': str(res)})}"]


def _item_label(result: dict[str, Any]) -> str:
    """An item as Ansible labels it (``loop_control.label``, else the item itself), short."""
    label = result.get("_ansible_item_label", result.get("item", "?"))
    text = label if isinstance(label, str) else json.dumps(label, default=str,
                                                           separators=(",", ":"))
    return text if len(text) <= 80 else text[:77] + "..."


def _why(result: dict[str, Any]) -> str:
    """A failed result's own words (see ``failure_lines``)."""
    msg = str(result.get("msg") or "").strip()
    # "MODULE FAILURE\nSee stdout/stderr for the exact error": the module's output says.
    module_failure = msg.upper().startswith("MODULE FAILURE")
    if msg.lower() not in _GENERIC_MSGS and not module_failure:
        return msg
    head = msg.splitlines()[0] if msg else "failed"
    if isinstance(result.get("rc"), int):
        head += f" (rc {result['rc']})"
    for key in ("stderr", "stdout", "module_stderr", "module_stdout"):
        lines = [line.rstrip() for line in str(result.get(key) or "").splitlines()
                 if line.strip()]
        if lines:
            return head + ": " + "\n    ".join(lines[-_TAIL_LINES:])
    return head


@dataclass
class Prepared:
    """A validated run: what to pass to Ansible and what it will do.

    ``sources``: the inventory sources (absolute paths); ``extra_args``: the user's ``-e``
    values (``@file`` made absolute) and ``--limit`` as ansible-playbook takes them;
    ``extravars``: the wrapper's own variables (run id, results folder, ``--case``), passed
    after the user's so that they win."""

    project: Path
    sources: list[str]
    plan: dict[str, Any]
    extravars: dict[str, Any]
    run_id: str
    extra_args: list[str] = field(default_factory=list)
    limit: str | None = None

    @property
    def run_dir(self) -> Path:
        return Path(self.plan["results_dir"]) / self.run_id


def new_run_id() -> str:
    """``run<YYYYmmddHHMMSS>`` in local time."""
    return time.strftime("run%Y%m%d%H%M%S")


def _absolute_source(source: str) -> str:
    """An inventory source as the steps (run from the project folder) must name it."""
    return source if "," in source else str(Path(source).resolve())


def _absolute_extra(option: str) -> str:
    """A ``-e`` value as the steps must give it: an ``@file`` by its absolute path."""
    return "@" + str(Path(option[1:]).resolve()) if option.startswith("@") else option


@contextlib.contextmanager
def _project_config(project: Path) -> Iterator[None]:
    """ansible-core configured as the steps' ansible-playbook is (the project's ansible.cfg:
    plugins, inventory plugins). Ansible reads its configuration once, when first imported;
    the variable is set only meanwhile, so that nothing else this process starts inherits it."""
    config = project / "ansible.cfg"
    saved = os.environ.get("ANSIBLE_CONFIG")
    if config.is_file():
        os.environ["ANSIBLE_CONFIG"] = str(config)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("ANSIBLE_CONFIG", None)
        else:
            os.environ["ANSIBLE_CONFIG"] = saved


def prepare(project: Path, sources: list[str] | str | Path, results_dir: str | None = None,
            cases: list[str] | None = None, run_id: str | None = None,
            resume: Path | None = None, check_data: bool = False,
            extra_vars: list[str] | None = None, limit: str | None = None) -> Prepared:
    """Read the inventory through Ansible (``inventory.read_inventory``: every source
    ``ansible-playbook -i`` takes, ``extra_vars`` as ``-e``, ``limit`` as ``--limit``), apply the
    command-line overrides (``results_dir``, ``cases``) and plan the run; with ``resume`` (a
    run folder), the run's id and results folder are that folder's; with ``check_data``, also
    the data folders of hosts reached with ``ansible_connection: local`` (a run's preflight
    checks every host's).

    Raises:
        ConfigError: the first bad input, naming its file and key.
    """
    if isinstance(sources, (str, Path)):
        sources = [str(sources)]
    if resume is not None:
        resume = Path(resume).resolve()
        if not (resume / "run.json").is_file():
            raise ConfigError("not a run folder (no run.json) to resume", str(resume))
        results_dir, run_id = str(resume.parent), resume.name
    user_extra = [_absolute_extra(e) for e in extra_vars or ()]
    extravars: dict[str, Any] = {}
    if results_dir:
        extravars["flagperf_results_dir"] = str(Path(results_dir).resolve())
    if cases:
        extravars["flagperf_cases"] = list(cases)
    with _project_config(project):
        inv = read_inventory(list(sources), user_extra, limit)
    settings = {**inv.settings, **extravars}
    origins = {**inv.origins, **{k: "command line" for k in extravars}}
    plan = build_plan(settings, origins, inv.hosts, {h: inv.address(h) for h in inv.hosts},
                      project)
    if check_data:
        _check_local_data(plan, inv, project, str(settings.get("flagperf_root") or ""),
                          origins.get("flagperf_cases", "extra vars"))
    run_id = run_id or new_run_id()
    extravars["flagperf_run_id"] = run_id
    # Every step finds the run's plan.json by these two, whatever hosts its play targets (a
    # flagperf_hosts group's vars do not reach the controller's plays).
    extravars["flagperf_results_dir"] = plan["results_dir"]
    extra_args = [arg for option in user_extra for arg in ("-e", option)]
    # The controller's plays (hosts: localhost) run under a limit only if it names localhost;
    # it is no benchmark host unless flagperf_hosts lists it.
    play_limit = f"{limit},localhost" if limit else None
    return Prepared(project=project, sources=[_absolute_source(s) for s in sources], plan=plan,
                    extravars=extravars, run_id=run_id, extra_args=extra_args, limit=play_limit)


def _check_local_data(plan: dict[str, Any], inv: Any, project: Path, root: str,
                      source: str) -> None:
    """On hosts reached with ``ansible_connection: local``, check each case's data folder in its
    case's data format now, and an inference case's ``exist_onnx_path`` (preflight checks the
    other hosts' data).

    Raises:
        ConfigError: the first problem of the first case whose data is wrong.
    """
    from flagperf_ansible import datasets
    from flagperf_ansible.config.settings import templated

    for index, case in enumerate(plan["cases"]):
        data_format, data_dir = case["contract"]["data_format"], case["spec"]["data_dir"]
        hosts = inv.hosts[: case["spec"]["nnodes"]]
        if not data_format or not data_dir or any(
                inv.host_vars.get(h, {}).get("ansible_connection") != "local" for h in hosts):
            continue
        base = Path(root) if root and not templated(root) else project
        path = Path(data_dir) if Path(data_dir).is_absolute() else base / data_dir
        problems = datasets.check(data_format, path)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ConfigError(f"data_dir {path} is not {data_format} data: {problems[0]}{more}; "
                              f"`flagperf-ansible data check {data_format} {path}` lists all",
                              source, f"flagperf_cases[{index}].data_dir")
        _check_local_onnx(plan, case["case_id"], path)


def _check_local_onnx(plan: dict[str, Any], case_id: str, data_dir: Path) -> None:
    """An inference case's ``exist_onnx_path`` (under its data folder unless absolute) must be
    a file: the round loads it instead of exporting one. ``exist_compiler_path`` need not
    exist (an engine writes it when it is missing).

    Raises:
        ConfigError: naming the file that set ``exist_onnx_path``.
    """
    first = next(r for r in plan["rounds"] if r["case_id"] == case_id)
    value = (first.get("config") or {}).get("exist_onnx_path")
    if not value or not isinstance(value, str):
        return
    path = Path(value) if Path(value).is_absolute() else data_dir / value
    if not path.is_file():
        record = first.get("vendor_config") or {}
        set_by = record.get("file") if "exist_onnx_path" in {
            *record.get("changed", {}), *record.get("added", {})} else None
        raise ConfigError(f"{path}: no such ONNX file ({case_id} loads it instead of exporting)",
                          set_by or f"the {case_id} case's configuration", "exist_onnx_path")


@dataclass
class StepResult:
    """How one ansible-runner step ended: ``failures`` (lines, see ``failure_lines``), the
    names of the ``tasks`` that failed and, when it did not succeed, ``log``: its whole Ansible
    output (None if it could not be written)."""

    status: str
    rc: int
    failures: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    log: Path | None = None


class Wrapper:
    """Runs a prepared run's steps with a progress display.

    Args:
        prepared: from ``prepare``.
        console: a ``rich.console.Console``.
    """

    def __init__(self, prepared: Prepared, console: Any, retries: int = 0) -> None:
        self.prepared = prepared
        self.console = console
        self.retries = retries
        self.interrupted = False
        self._interrupted_in = ""
        # A second interrupt: stop waiting for the step's own clean-up, kill it.
        self.given_up = False
        self._progress = None
        self._task = None
        self._label = ""

    # ansible-runner callbacks -------------------------------------------------------------
    def _on_event(self, event: dict[str, Any]) -> bool:
        data = event.get("event_data") or {}
        if event.get("event") == "playbook_on_task_start" and self._progress is not None:
            self._progress.update(self._task, description=f"{self._label}: {data.get('task', '')}")
        elif event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            if not data.get("ignore_errors"):
                self._failures.extend(failure_lines(data))
                if data.get("task") and data["task"] not in self._failed_tasks:
                    self._failed_tasks.append(data["task"])
        elif event.get("event") == "verbose" and "flagperf-progress:" in (event.get("stdout") or ""):
            # Where the round's rank 0 is (plugins/action/node_wait.py): on the bar, not a line.
            if self._progress is not None:
                where = (event.get("stdout") or "").split("flagperf-progress:", 1)[1].strip()
                self._progress.update(self._task, description=f"{self._label}: {where}")
        elif event.get("event") == "verbose" and "flagperf:" in (event.get("stdout") or ""):
            self.console.print((event.get("stdout") or "").strip())
        return True

    def _cancelled(self) -> bool:
        return self.given_up

    def _run_step(self, ident: str, playbook: str, extravars: dict[str, Any]) -> StepResult:
        import ansible_runner

        self._failures: list[str] = []
        self._failed_tasks: list[str] = []
        project = self.prepared.project
        env = {
            "ANSIBLE_CONFIG": str(project / "ansible.cfg"),
            "ANSIBLE_CALLBACK_PLUGINS": str(project / "plugins" / "callback"),
            "ANSIBLE_FORCE_COLOR": "0",
            # ansible-runner gives Ansible a terminal: no colour codes in the kept output.
            "ANSIBLE_NOCOLOR": "1",
            # run.json records the user's command, not ansible-runner's ansible-playbook line.
            COMMAND_ENV: "flagperf-ansible " + shlex.join(sys.argv[1:]),
            REPORT_STEP_FOLLOWS_ENV: "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        with tempfile.TemporaryDirectory(prefix="flagperf-runner-") as private:
            kwargs: dict[str, Any] = dict(
                private_data_dir=private,
                project_dir=str(project),
                playbook=str(project / playbook),
                inventory=self.prepared.sources,
                # The user's -e first, then the wrapper's own (-e @env/extravars): those win.
                cmdline=shlex.join(self.prepared.extra_args) or None,
                limit=self.prepared.limit,
                extravars=extravars,
                envvars=env,
                ident=ident,
                quiet=True,
                suppress_env_files=True,
                event_handler=self._on_event,
                cancel_callback=self._cancelled,
            )
            # ansible-runner finds ansible-playbook on PATH: prefer the one beside this Python.
            os.environ["PATH"] = env["PATH"]
            thread, runner = ansible_runner.run_async(**kwargs)
            thread.join()
            failures, log = self._failures, None
            if runner.status != "successful":
                # The artifacts go with the temporary folder: keep the output in the run's.
                output = runner.stdout.read()
                log = self._keep_log(ident, output)
                if not failures:
                    # No task failed: Ansible itself stopped (syntax, inventory); its last words.
                    failures = [line for line in output.splitlines() if line.strip()][-5:]
            return StepResult(status=runner.status, rc=runner.rc or 0, failures=failures,
                              tasks=self._failed_tasks, log=log)

    def _keep_log(self, ident: str, output: str) -> Path | None:
        """``output`` into ``<run_dir>/ansible/<ident>.log`` (the run folder is made if
        preflight stopped before it); its path, or None when it cannot be written."""
        path = self.prepared.run_dir / ANSIBLE_LOG_DIR / f"{ident}.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(output, encoding="utf-8")
        except OSError as err:
            self.console.print(f"[yellow]could not keep Ansible's output in {path}: {err}"
                               "[/yellow]")
            return None
        return path

    # the run ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Run every step; return the run summary (also written to the run dir)."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
            TimeElapsedColumn

        prepared = self.prepared
        rounds = prepared.plan["rounds"]
        previous = {sig: signal.signal(sig, self._interrupt)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=self.console, transient=False) as progress:
                self._progress = progress
                self._task = progress.add_task("preflight", total=len(rounds))
                for label, playbook in (("preflight", "playbooks/preflight.yml"),
                                        ("prepare", "playbooks/prepare.yml")):
                    self._label = label
                    progress.update(self._task, description=label)
                    step = self._run_step(label, playbook, prepared.extravars)
                    if step.status != "successful":
                        if not self.interrupted:
                            self._report_failure(label, step)
                        rounds = []
                        break
                    if label == "preflight":
                        # The run's plan as preflight wrote it: what the rounds will run.
                        rounds = self._read_plan()["rounds"]
                for item in rounds:
                    if self.interrupted:
                        break
                    per_case = len([r for r in rounds if r["case_id"] == item["case_id"]])
                    self._label = f"{item['case_id']} round {item['round']}/{per_case}"
                    progress.update(self._task, description=self._label)
                    self._run_round(item["key"])
                    progress.advance(self._task)
                self._report(progress)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._progress = None
        return self._finish()

    def _report(self, progress: Any) -> None:
        """The report step, also after an interrupt (the summary of what ran); not after a
        second interrupt, nor before preflight recorded the run."""
        if self.given_up or not (self.prepared.run_dir / "run.json").is_file():
            return
        if self.interrupted:
            mark_interrupted(self.prepared.run_dir, self._interrupted_in)
        self._label = "report"
        progress.update(self._task, description="report")
        step = self._run_step("report", "playbooks/report.yml", self.prepared.extravars)
        if step.status != "successful" and not self.interrupted:
            self._report_failure("report", step)
        progress.update(self._task, description="done")

    def _read_plan(self) -> dict[str, Any]:
        """``plan.json`` of the run (written by preflight), or the plan validated before the
        run when preflight wrote none."""
        path = self.prepared.run_dir / PLAN_FILE
        if path.is_file():
            self.prepared.plan = read_json(path)
        return self.prepared.plan

    def _run_round(self, key: str) -> None:
        """One round, again while it fails and retries are left; skipped when it passed already
        (resume). An interrupt is the step's own to handle (the results callback stops the
        round on its hosts and records it as interrupted)."""
        run_dir = self.prepared.run_dir
        for attempt in range(self.retries + 1):
            if round_status_of(run_dir, key) == "passed":
                if attempt == 0:
                    self.console.print(f"{key}: passed already, not run again")
                return
            if keep_attempt(run_dir, key) is not None:
                self.console.print(f"{key}: earlier attempt kept under {key}/attempts/")
            step = self._run_step(f"round-{key.replace('/', '-')}-{attempt}",
                                  "playbooks/rounds.yml",
                                  {**self.prepared.extravars, "flagperf_select": key})
            if self.interrupted:
                return
            if step.status != "successful":
                self._report_failure(key, step)

    def _finish(self) -> dict[str, Any]:
        """The run's summary as the report wrote it; a failed (or interrupted) one where there
        is none (the run stopped before preflight recorded it)."""
        summary = read_optional(self.prepared.run_dir / SUMMARY_JSON)
        if isinstance(summary, dict):
            return summary
        return {"run_id": self.prepared.run_id,
                "status": "interrupted" if self.interrupted else "failed", "cases": []}

    def _interrupt(self, _signum, _frame) -> None:
        if self.interrupted:
            self.given_up = True
            self.console.print("[yellow]interrupted again: giving up on cleaning up[/yellow]")
            return
        self.interrupted = True
        self._interrupted_in = self._label
        self.console.print("[yellow]interrupted: stopping the current step "
                           "(again to give up on cleaning up)...[/yellow]")
        self._signal_step(signal.SIGTERM)

    @staticmethod
    def _signal_step(signum: int) -> None:
        """``signum`` to the step's ansible-playbook, this process's child (ansible-runner
        starts it in a terminal of its own, which a Ctrl-C does not reach)."""
        import psutil

        for child in psutil.Process().children():
            try:
                if any("ansible-playbook" in part for part in child.cmdline()[:2]):
                    child.send_signal(signum)
            except psutil.Error:
                continue

    def _report_failure(self, label: str, step: StepResult) -> None:
        from rich.markup import escape

        where = f" in {', '.join(step.tasks)}" if step.tasks else ""
        self.console.print(f"[red]{escape(label)}: {step.status}[/red]{escape(where)}",
                           highlight=False)
        shown = step.failures[:_SHOWN_FAILURES]
        for line in shown:
            # markup=False: a message may hold brackets ("[Errno 20]") rich would eat.
            self.console.print(f"  {line}", markup=False, highlight=False)
        if len(step.failures) > len(shown):
            self.console.print(f"  (and {len(step.failures) - len(shown)} more)",
                               highlight=False)
        if step.log is not None:
            self.console.print(f"  Ansible's output of this step: {step.log}", markup=False,
                               highlight=False)


__all__ = ["ConfigError", "Prepared", "Wrapper", "failure_lines", "prepare", "new_run_id"]
