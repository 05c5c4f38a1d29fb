"""Writes run.json, each round's round.json and the summaries as the playbooks hand them over,
and cleans up a round that an interrupt left in flight.

The playbooks hand data over with ``ansible.builtin.set_stats``: ``flagperf_run`` (preflight),
``flagperf_round_start`` (a round begins), ``flagperf_round`` (after each round's collect) and
``flagperf_report`` (report). The work is done by the flagperf_ansible package; this adapter
only routes.

Interrupts: SIGTERM is handled as Ctrl-C (Ansible's own SIGINT path: workers told, the run
stops). If a round was in flight when ansible-playbook exits, ``playbooks/cleanup.yml`` is run
with the same inventory and extra vars: it stops the round's containers, processes and monitors
on every host, fetches what they wrote, records the round and rebuilds the summary. The round
is ``interrupted`` only after Ctrl-C or SIGTERM; when Ansible stopped for another reason (an
error of its own, a task that failed outside a round's rescue) it is ``failed``, with the
error that stopped it as its reason. An interrupt with no round in flight (preflight once the
run is recorded, prepare, between rounds, the report) marks the run interrupted in that phase
and writes the summary of what ran; under the wrapper, whose report step follows, only the
mark. An interrupt while the report writes summary.html keeps summary.json and summary.md
(written first) and leaves the HTML to ``flagperf-ansible summarize``.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

try:
    import flagperf_ansible  # noqa: F401
except ImportError:  # running from a checkout without `pip install`: src/ beside plugins/
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ansible.plugins.callback import CallbackBase

from flagperf_ansible.results.layout import REPORT_STEP_FOLLOWS_ENV, RUN_FILE, SUMMARY_HTML, \
    mark_interrupted, mark_round_start, write_run, write_text
from flagperf_ansible.results.rounds import finalize_round
from flagperf_ansible.results.report import summary_html, write_summary

DOCUMENTATION = """
name: flagperf_results
type: aggregate
short_description: write flagperf-ansible results files
description: Turns the run, round and report records handed over with set_stats into
  run.json, round.json and summary.json/summary.md under the run's results dir; after an
  interrupt, runs playbooks/cleanup.yml for the round in flight.
requirements:
  - enable in ansible.cfg (callbacks_enabled = flagperf_results)
"""

PROJECT = Path(__file__).resolve().parents[2]


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "flagperf_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._in_flight: dict | None = None
        # The run being written, and the phase (the play's playbook: preflight, prepare,
        # rounds, report) an interrupt would stop.
        self._run_dir: Path | None = None
        self._phase = ""
        self._summary_written = False
        self._cleanup_armed = False
        self._interrupted = False
        # What went wrong while a round was in flight: a failed task, or Ansible's own error.
        self._errors: list[str] = []

    def v2_playbook_on_start(self, playbook):
        if self._cleanup_armed:
            return
        self._cleanup_armed = True
        self._take_signals()
        # Ansible's own errors (a recursion limit, a bad template outside a task) reach the
        # user through its display, not as a task result: keep the last one for the record.
        error = self._display.error

        def keep_error(msg, *args, **kwargs):
            text = str(getattr(msg, "message", msg)).strip()
            if isinstance(msg, BaseException) and msg.__cause__ is not None:
                text += f": {msg.__cause__}"
            if "User interrupted execution" in text:      # Ctrl-C, as ansible-playbook says it
                self._interrupted = True
            elif self._in_flight is not None:
                self._errors.append(text)
            return error(msg, *args, **kwargs)

        self._display.error = keep_error
        atexit.register(self._at_exit)

    def _take_signals(self):
        """Ansible's SIGINT handler tells the workers and stops the run with KeyboardInterrupt;
        SIGTERM goes the same way, so that the round in flight is cleaned up (atexit) instead of
        the process just dying. Both are noted, as the KeyboardInterrupt can be lost: raised
        while the interpreter runs a fork hook, it is printed and dropped, the run goes on, and
        Ansible has already set the next Ctrl-C to kill outright. The next task raises it again
        (``_interrupt_if_lost``)."""
        on_sigint = signal.getsignal(signal.SIGINT)
        if not callable(on_sigint):
            return

        def interrupted(_signum, frame):
            self._interrupted = True
            on_sigint(signal.SIGINT, frame)

        signal.signal(signal.SIGINT, interrupted)
        signal.signal(signal.SIGTERM, interrupted)

    def _interrupt_if_lost(self):
        if self._interrupted:
            raise KeyboardInterrupt

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._interrupt_if_lost()

    def v2_playbook_on_handler_task_start(self, task):
        self._interrupt_if_lost()

    def v2_playbook_on_play_start(self, play):
        self._interrupt_if_lost()
        path = str(play.get_path() or "").rsplit(":", 1)[0]
        self._phase = Path(path).stem
        # The wrapper names the run in every step (site.yml's preflight hands it over below).
        extra = getattr(getattr(play, "_variable_manager", None), "extra_vars", None) or {}
        if extra.get("flagperf_results_dir") and extra.get("flagperf_run_id"):
            self._run_dir = Path(str(extra["flagperf_results_dir"]),
                                 str(extra["flagperf_run_id"]))

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if self._in_flight is not None and not ignore_errors:
            payload = getattr(result, "result", None) or getattr(result, "_result", {}) or {}
            host = getattr(getattr(result, "host", None) or getattr(result, "_host", None), "name", "?")
            task = getattr(getattr(result, "task", None) or getattr(result, "_task", None), "name", "?")
            self._errors.append(f"{host}: {task}: {str(payload.get('msg', '')).strip()}")

    def v2_runner_on_unreachable(self, result):
        self.v2_runner_on_failed(result)

    def v2_runner_on_ok(self, result):
        payload = getattr(result, "result", None)
        if payload is None:
            payload = getattr(result, "_result", {})
        data = ((payload or {}).get("ansible_stats") or {}).get("data") or {}
        try:
            if "flagperf_run" in data:
                record = data["flagperf_run"]
                self._run_dir = Path(record["run_dir"])
                write_run(Path(record["run_dir"]), record["plan"], record.get("extra", {}),
                                  PROJECT)
            if "flagperf_round_start" in data:
                record = data["flagperf_round_start"]
                self._run_dir = Path(record["run_dir"])
                mark_round_start(self._run_dir, str(record["key"]))
                self._errors = []
                self._in_flight = {"run_dir": str(record["run_dir"]), "key": str(record["key"])}
            if "flagperf_round" in data:
                self._in_flight = None
                document = finalize_round(data["flagperf_round"])
                self._display.display(
                    f"flagperf: {document['case_id']} round {document['round']}: "
                    f"{document['status']} {document['reason']}".rstrip())
            if "flagperf_report" in data:
                self._run_dir = Path(data["flagperf_report"]["run_dir"])
                self._write_summary(self._run_dir)
        except (OSError, ValueError, KeyError) as err:
            # Never lose the run over a results-writing problem: say it, keep going.
            self._display.warning(f"flagperf_results: could not write results: {err}")

    def _at_exit(self):
        if self._in_flight is not None:
            self._clean_up_in_flight()
        elif self._interrupted:
            self._record_interrupt()

    def _record_interrupt(self):
        """After an interrupt with no round in flight, once the run is recorded: the mark, and
        the summary of what ran (in the report phase json and md only, as its HTML is the slow
        part; under the wrapper, whose report step follows, none outside that phase)."""
        run_dir = self._run_dir
        if run_dir is None or not (run_dir / RUN_FILE).is_file() or self._phase == "cleanup":
            return
        report = self._phase == "report"
        mark_interrupted(run_dir, "between rounds" if self._phase == "rounds" else self._phase)
        if (self._summary_written if report else os.environ.get(REPORT_STEP_FOLLOWS_ENV)):
            return
        # Ctrl-C again while the summary is written is the way to give up on it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            self._write_summary(run_dir, html=not report)
        except KeyboardInterrupt:
            return

    def _clean_up_in_flight(self):
        """At exit with a round in flight (interrupt, or Ansible stopped mid-round)."""
        from ansible import context

        in_flight, self._in_flight = self._in_flight, None
        run_dir = Path(in_flight["run_dir"])
        self._display.display(f"flagperf: stopping round {in_flight['key']} on its hosts")
        argv = [sys.argv[0], str(PROJECT / "playbooks" / "cleanup.yml")]
        for source in context.CLIARGS.get("inventory") or ():
            argv += ["-i", source]
        for extra in context.CLIARGS.get("extra_vars") or ():
            argv += ["-e", extra]
        # The run's folder by name: its plan.json is what the clean-up follows.
        argv += ["-e", json.dumps({"flagperf_results_dir": str(run_dir.parent),
                                   "flagperf_run_id": run_dir.name,
                                   "flagperf_select": in_flight["key"]})]
        error = "" if self._interrupted else (
            self._errors[-1] if self._errors
            else "ansible-playbook stopped mid-round without a word (see its output)")
        if error:
            argv += ["-e", json.dumps({"cleanup_round_error": error[-2000:]})]
        else:
            mark_interrupted(run_dir, in_flight["key"])
        # Ctrl-C again while cleaning up is the way to give up on it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # The child's output comes through this display: Ansible may have left its own
        # standard streams non-blocking, which a child ansible-playbook refuses to start with.
        try:
            with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) as child:
                for line in child.stdout:
                    self._display.display(line.rstrip("\n"))
        except KeyboardInterrupt:
            return
        if not (run_dir / in_flight["key"] / "round.json").is_file():
            # The clean-up could not record it (and so did not report): this callback does.
            finalize_round({"run_dir": str(run_dir), "key": in_flight["key"],
                            "interrupted": not error, "error": error, "hosts": []})
            self._write_summary(run_dir)

    def _write_summary(self, run_dir: Path, html: bool = True) -> None:
        """summary.json, .md and (``html``) .html of the run: this callback is their one writer.
        The HTML comes last (its plots take the time): an interrupt while it is drawn keeps the
        other two, marks the run interrupted in its report and goes on to Ansible."""
        summary = write_summary(run_dir, html=False)
        self._summary_written = True
        self._display.display(f"flagperf: run {summary['run_id']}: {summary['status']}")
        if not html:
            (run_dir / SUMMARY_HTML).unlink(missing_ok=True)     # it would say something else
            self._display.display(f"flagperf: summary.html not written: flagperf-ansible "
                                  f"summarize {run_dir}")
            return
        try:
            write_text(run_dir / SUMMARY_HTML, summary_html(run_dir, summary))
        except KeyboardInterrupt:
            self._interrupted = True
            mark_interrupted(run_dir, "report")
            (run_dir / SUMMARY_HTML).unlink(missing_ok=True)
            self._display.display(f"flagperf: summary.html not written (interrupted): "
                                  f"flagperf-ansible summarize {run_dir}")
            raise
