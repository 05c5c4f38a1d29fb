"""The results layout (DESIGN.md "Results layout"): run.json, round.json, summary.json.

::

    <results_dir>/<run_id>/
      run.json  summary.json  summary.md  summary.html
      <case_id>/round<k>/
        round.json
        <host>_noderank<i>/   rank<R>.out.log, monitor files, launcher.log, config.yaml,
                              sys_info.json

Every JSON file is written atomically (temporary file, then rename), so a reader never sees
half a file and an interrupted run keeps what it had. JSON Schemas of round.json and
summary.json are in ``schemas/``.

FlagPerf's own results folders (``<case>/round<k>/<ip>_noderank<i>/rank<R>.out.log``, no
run.json) are read by ``import_flagperf`` into the same round.json files.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from flagperf_ansible.mfu import round_mfu
from flagperf_ansible.monitoring import summarize_round
from flagperf_ansible.perflog import find_rank_logs, parse_rank_log
from flagperf_ansible.provenance import Masker, controller_provenance, host_label, node_dir_name
from flagperf_ansible.stats import OLYMPIC_MIN_N, case_passes, describe, numeric_fields

_NODE_DIR = re.compile(r"^(?P<host>.+)_noderank(?P<noderank>\d+)$")


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=False, default=str)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def round_status(hosts: list[dict[str, Any]], finished: dict[str, Any] | None,
                 interrupted: bool = False, exit_codes_known: bool = True,
                 error: str = "") -> tuple[str, str]:
    """``(status, reason)`` of a round from its hosts' launch results and rank 0's FINISHED.

    ``hosts`` items carry ``host``, ``rc`` (None when unknown), ``timed_out``, and optionally
    ``stopped`` (still running when the round ended: stopped), ``lost`` (the host left the
    run, e.g. unreachable) and ``error`` (an orchestration error on that host: a task that
    failed there). ``error`` is one that stopped the whole run mid-round (Ansible's own). Only
    Ctrl-C or SIGTERM make a round ``interrupted``; an orchestration error makes it
    ``failed`` with that error as its reason. A node that failed comes first in the reason;
    the nodes stopped because of it are named after. With ``exit_codes_known`` False
    (FlagPerf's folders keep no exit codes) only FINISHED counts.
    """
    if error:
        return "failed", f"orchestration error: {error}"
    if interrupted:
        return "interrupted", "the run was interrupted"
    broken = [f"{h['host']}: {h['error']}" for h in hosts if h.get("error")]
    if broken:
        return "failed", f"orchestration error on {'; '.join(broken)}"
    lost = [h["host"] for h in hosts if h.get("lost")]
    if lost:
        return "failed", f"host lost during the round: {', '.join(lost)}"
    if exit_codes_known:
        failed = [f"{h['host']} (exit {h.get('rc')})" for h in hosts
                  if h.get("rc") is not None and h.get("rc") != 0]
        stopped = [h["host"] for h in hosts if h.get("stopped")]
        if failed:
            also = f"; stopped {', '.join(stopped)}" if stopped else ""
            return "failed", f"launch failed on {', '.join(failed)}{also}"
    timed_out = [h["host"] for h in hosts if h.get("timed_out")]
    if timed_out:
        return "timeout", f"no exit within the case timeout on {', '.join(timed_out)}"
    failed = [f"{h['host']} (exit {h.get('rc')})" for h in hosts
              if exit_codes_known and h.get("rc") != 0]
    if failed:
        return "failed", f"launch failed on {', '.join(failed)}"
    if finished is None:
        return "failed", "rank 0 wrote no FINISHED event"
    if finished.get("converged") is not True:
        return "failed", "did not converge to its target"
    return "passed", ""


PLAN_FILE = "plan.json"             # the run's plan (build_plan), for later phases and the wrapper
ROUND_START = "round_start.json"     # written when a round begins: key, started_ms
ROUND_RECORD = "round_record.json"   # what the playbook handed over: round.json's raw input
ATTEMPTS = "attempts"                # earlier attempts of a round: attempts/<n>/


def mark_round_start(run_dir: Path, key: str) -> None:
    """Note that round ``key`` (``<case_id>/round<k>``) began: ``round_start.json`` with the
    time (epoch ms). A round with this file and no ``round.json`` was in flight."""
    write_json(Path(run_dir) / key / ROUND_START,
               {"key": key, "started_ms": int(time.time() * 1000)})


def keep_attempt(run_dir: Path, key: str) -> int | None:
    """Move a round's files (a failed, timed-out or interrupted attempt) to ``attempts/<n>/``
    under its folder, so that the round can run again without counting twice; returns ``n``,
    or None when there was nothing to keep."""
    round_dir = Path(run_dir) / key
    entries = [p for p in round_dir.iterdir() if p.name != ATTEMPTS] if round_dir.is_dir() else []
    if not entries:
        return None
    attempts = round_dir / ATTEMPTS
    number = 1 + max((int(p.name) for p in attempts.iterdir() if p.name.isdigit()), default=0) \
        if attempts.is_dir() else 1
    target = attempts / str(number)
    target.mkdir(parents=True)
    for entry in entries:
        os.replace(entry, target / entry.name)
    return number


def _attempts(round_dir: Path) -> list[dict[str, Any]]:
    """round.json's ``attempts``: each earlier attempt's status, reason and hosts."""
    found = []
    folder = round_dir / ATTEMPTS
    for path in sorted(folder.glob("*/round.json"), key=lambda p: int(p.parent.name)):
        earlier = _read_optional(path) or {}
        found.append({
            "attempt": int(path.parent.name),
            "status": earlier.get("status", "failed"),
            "reason": earlier.get("reason", ""),
            "failed_hosts": earlier.get("failed_hosts", []),
            "hosts": [n.get("host") for n in earlier.get("nodes", [])],
            "started_ms": earlier.get("started_ms"),
            "ended_ms": earlier.get("ended_ms"),
        })
    return found


def round_status_of(run_dir: Path, key: str) -> str | None:
    """The status in a round's round.json, or None when it has none (not run, or in flight)."""
    document = _read_optional(Path(run_dir) / key / "round.json")
    return document.get("status") if isinstance(document, dict) else None


def refinalize_round(round_dir: Path) -> dict[str, Any] | None:
    """Parse a round again from its raw artifacts (``round_record.json`` and the fetched files)
    into ``round.json``; None when the round has no record (e.g. a FlagPerf folder)."""
    record = _read_optional(round_dir / ROUND_RECORD)
    if not isinstance(record, dict):
        return None
    record["run_dir"] = str(round_dir.parent.parent)
    return finalize_round(record)


def finalize_round(record: dict[str, Any]) -> dict[str, Any]:
    """Parse one round's fetched rank logs and write its ``round.json``.

    Args:
        record: what the collect role hands over: ``run_dir``, ``key``
            (``<case_id>/round<k>``), ``case_id``, ``round``, ``hosts`` (each ``host``,
            ``noderank``, ``rc``, ``timed_out``), ``config``, ``overrides``, ``metric``,
            ``diagnostic``, ``started_ms``, ``ended_ms`` and optionally ``interrupted``,
            ``error`` (an orchestration error that stopped the run mid-round),
            ``mfu_basis`` (from the plan, see ``flagperf_ansible.mfu``), ``mask_hosts`` and
            ``plan_hosts`` (the plan's ``hosts``), ``exit_codes_known`` (default True).

    Returns:
        The round document written (see DESIGN.md; schema in ``schemas/round.schema.json``),
        host names and addresses masked when ``mask_hosts``. Its ``monitor`` key is
        ``monitoring.summarize_round``: per node and overall, the monitors' status (a monitor
        that died says so), utilisation, memory, power, energy.
    """
    round_dir = Path(record["run_dir"]) / record["key"]
    record = dict(record)
    record.setdefault("case_id", record["key"].split("/")[0])
    record.setdefault("round", int(record["key"].rsplit("round", 1)[-1]))
    start = _read_optional(round_dir / ROUND_START) or {}
    if record.get("interrupted") or not record.get("started_ms"):
        record["started_ms"] = start.get("started_ms") or record.get("started_ms")
    record.setdefault("ended_ms", int(time.time() * 1000))
    # The raw input is kept beside the logs: `summarize` parses the round again from both.
    mask = bool(record.get("mask_hosts"))
    write_json(round_dir / ROUND_RECORD, Masker(record.get("plan_hosts") or [], mask)(
        {k: v for k, v in record.items() if k != "run_dir"}))
    ranks: dict[str, Any] = {}
    bad_lines = 0
    events_by_rank = []
    for path in find_rank_logs(round_dir):
        if ATTEMPTS in path.relative_to(round_dir).parts:
            continue
        log = parse_rank_log(path)
        bad_lines += log.bad_lines
        events_by_rank.append(log.events)
        if log.rank is not None:
            ranks[str(log.rank)] = log.finished
    finished = ranks.get("0")
    hosts = list(record.get("hosts") or [])
    known = record.get("exit_codes_known", True) is not False
    interrupted = bool(record.get("interrupted"))
    status, reason = round_status(hosts, finished, interrupted, known, str(record.get("error") or ""))
    nodes = []
    for host in hosts:
        node = round_dir / node_dir_name(host["host"], int(host["noderank"]), mask)
        sys_info = node / "sys_info.json"
        nodes.append({
            "host": host["host"], "noderank": int(host["noderank"]), "rc": host.get("rc"),
            "timed_out": bool(host.get("timed_out")), "stopped": bool(host.get("stopped")),
            "lost": bool(host.get("lost")), "error": str(host.get("error") or ""),
            "wait_slices": host.get("wait_slices"), "dir": node.name,
            "files": sorted(p.name for p in node.iterdir()) if node.is_dir() else [],
            "sys_info": _read_optional(sys_info),
        })
    started, ended = record.get("started_ms"), record.get("ended_ms")
    # Only the hosts whose node failed: the peers a failure stopped are stopped_hosts.
    failed_hosts = [h["host"] for h in hosts
                    if (h.get("rc") is not None and h.get("rc") != 0) or h.get("timed_out")
                    or h.get("lost") or h.get("error")]
    ran_to_finish = (finished is not None and not interrupted
                     and not any(h.get("timed_out") for h in hosts)
                     and (not known or all(h.get("rc") == 0 for h in hosts)))
    document = {
        "case_id": record["case_id"],
        "round": int(record["round"]),
        "status": status,
        "reason": reason,
        "ran_to_finish": ran_to_finish,
        "converged": bool(finished and finished.get("converged") is True),
        "diagnostic": bool(record.get("diagnostic")),
        "metric": record.get("metric") or guess_metric(finished),
        "started_ms": started,
        "ended_ms": ended,
        "wall_time": (ended - started) / 1000.0 if started and ended else None,
        "failed_hosts": failed_hosts,
        "stopped_hosts": [h["host"] for h in hosts if h.get("stopped") and h["host"] not in failed_hosts],
        "finished": finished,
        "ranks": ranks,
        "unparsed_perflog_lines": bad_lines,
        "nodes": nodes,
        "config": record.get("config") or {},
        "overrides": record.get("overrides") or {},
        "monitor": summarize_round(round_dir, [n["dir"] for n in nodes], events_by_rank,
                                   finished, ended),
        "mfu": round_mfu(record.get("mfu_basis"), finished),
    }
    attempts = _attempts(round_dir)
    if attempts:
        document["attempts"] = attempts
    document = Masker(record.get("plan_hosts") or [], mask)(document)
    write_json(round_dir / "round.json", document)
    return document


def _read_optional(path: Path) -> Any:
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def guess_metric(finished: dict[str, Any] | None) -> str | None:
    """The case metric from FINISHED's ``final_<metric>`` keys (for logs with no plan): the
    first one that is not the loss, else ``loss``; None without any."""
    names = [k[len("final_"):] for k in (finished or {}) if k.startswith("final_")]
    return next((n for n in names if n != "loss"), names[0] if names else None)


def write_run(run_dir: Path, plan: dict[str, Any], extra: dict[str, Any],
              project: Path | None = None) -> dict[str, Any]:
    """Write ``run.json``: what was asked (cases and rounds planned), how, and by what; and
    ``plan.json``: the plan itself (``flagperf_ansible.plan.build_plan``), read by later phases.

    ``extra`` may carry ``inventory`` (its name) and ``ansible_version``; the provenance block
    (git commit, command, hosts, versions, image) comes from ``controller_provenance``.
    Host names and addresses are masked when the plan says ``mask_hosts``.
    """
    from flagperf_ansible.paths import project_dir

    extra = dict(extra)
    provenance = controller_provenance(project or project_dir(), plan,
                                       str(extra.pop("inventory", "")),
                                       extra.pop("ansible_version", None))
    extra.pop("hosts", None)  # in provenance.inventory.hosts, with addresses and labels
    document = {
        "run_id": run_dir.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "vendor": plan["vendor"],
        "container_runtime": plan["runtime"],
        "mask_hosts": bool(plan.get("mask_hosts")),
        "provenance": provenance,
        "cases": plan["cases"],
        **extra,
    }
    document = Masker(plan.get("hosts") or [], bool(plan.get("mask_hosts")))(document)
    write_json(run_dir / "run.json", document)
    # What will run where, for the later phases and the wrapper (as the inventory names the
    # hosts, also with mask_hosts: the playbooks reach them by those names).
    write_json(run_dir / PLAN_FILE, plan)
    return document


def round_figures(document: dict[str, Any]) -> dict[str, Any]:
    """A round's figures for statistics: FINISHED plus the controller's ``mfu`` if computed."""
    figures = dict(document.get("finished") or {})
    mfu = (document.get("mfu") or {}).get("value")
    if "mfu" not in figures and isinstance(mfu, (int, float)):
        figures["mfu"] = mfu
    return figures


def _case_stats(rounds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    measured = [round_figures(r) for r in rounds if r["status"] == "passed" and r.get("finished")]
    return {key: describe(f[key] for f in measured if isinstance(f.get(key), (int, float))
                          and not isinstance(f.get(key), bool))
            for key in numeric_fields(measured)}


def build_summary(run_dir: Path) -> dict[str, Any]:
    """Gather every ``round.json`` of a run into the summary document (nothing is written).

    A case's rounds that ``run.json`` planned but that have no ``round.json`` are listed as
    ``missing``. A case passes by ``stats.case_passes``: every planned round ran to FINISHED
    and all converged, or (5 rounds or more) all but one converged (MLPerf's rule). The run's
    status is ``passed`` only when every case passed. Statistics (``stats.describe``) cover
    every numeric FINISHED figure and ``mfu`` of the rounds that passed (converged).
    """
    run = read_json(run_dir / "run.json") if (run_dir / "run.json").is_file() else {}
    planned = {c["case_id"]: c for c in run.get("cases", [])}
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(run_dir.glob("*/round*/round.json")):
        document = read_json(path)
        found.setdefault(document["case_id"], []).append(document)
    cases = []
    all_passed = bool(planned or found)
    for case_id in list(planned) + [c for c in found if c not in planned]:
        rounds = sorted(found.get(case_id, []), key=lambda r: r["round"])
        repeat = (planned.get(case_id) or {}).get("spec", {}).get("repeat", len(rounds))
        missing = sorted(set(range(1, repeat + 1)) - {r["round"] for r in rounds})
        passed = sum(r["status"] == "passed" for r in rounds)
        ran = sum(bool(r.get("ran_to_finish", r["status"] == "passed")) for r in rounds)
        converged = sum(bool(r.get("converged")) for r in rounds)
        case_passed = case_passes(repeat, ran, converged) and not missing
        all_passed &= case_passed
        cases.append({
            "case_id": case_id,
            "spec": (planned.get(case_id) or {}).get("spec"),
            "metric": (planned.get(case_id) or {}).get("metric")
            or (rounds[0]["metric"] if rounds else None),
            "diagnostic": (planned.get(case_id) or {}).get("diagnostic", False),
            "status": "passed" if case_passed else "failed",
            "pass_rule": ("all rounds converged, or at most one did not (MLPerf, n >= "
                          f"{OLYMPIC_MIN_N})" if repeat >= OLYMPIC_MIN_N
                          else "all rounds converged"),
            "rounds_planned": repeat,
            "rounds_passed": passed,
            "rounds_ran_to_finish": ran,
            "rounds_converged": converged,
            "missing_rounds": missing,
            "rounds": [
                {"round": r["round"], "status": r["status"], "reason": r.get("reason", ""),
                 "converged": r.get("converged", False), "wall_time": r.get("wall_time"),
                 "finished": r.get("finished"), "mfu": r.get("mfu"),
                 "overrides": r.get("overrides") or {}, "nodes": r.get("nodes", [])}
                for r in rounds
            ],
            "stats": _case_stats(rounds),
        })
    return {
        "run_id": run.get("run_id", run_dir.name),
        "status": "passed" if all_passed else "failed",
        "vendor": run.get("vendor"),
        "source": "flagperf-ansible" if run else "flagperf",
        "provenance": run.get("provenance"),
        "cases": cases,
    }


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def reparse_rounds(run_dir: Path) -> int:
    """Write every round.json of a run again from raw artifacts (``refinalize_round``); a round
    that began but left neither record nor round.json (its run was killed) is written as
    ``interrupted``. Returns the number of rounds written."""
    count = 0
    for start in sorted(run_dir.glob(f"*/round*/{ROUND_START}")):
        round_dir = start.parent
        if refinalize_round(round_dir) is not None:
            count += 1
        elif not (round_dir / "round.json").is_file():
            finalize_round({"run_dir": str(run_dir), "key": f"{round_dir.parent.name}/{round_dir.name}",
                            "interrupted": True, "hosts": []})
            count += 1
    return count


def write_summary(run_dir: Path, html: bool = True, reparse: bool = False) -> dict[str, Any]:
    """Rebuild ``summary.json``, ``summary.md`` and (``html``) ``summary.html`` from the run's
    round.json files (with ``reparse``, first each round.json from its raw artifacts, see
    ``reparse_rounds``); a FlagPerf results folder is first read with ``import_flagperf``."""
    from flagperf_ansible.report import summary_html, summary_markdown

    if reparse:
        reparse_rounds(run_dir)
    if is_flagperf_layout(run_dir):
        import_flagperf(run_dir)
    summary = build_summary(run_dir)
    write_json(run_dir / "summary.json", summary)
    _write_text(run_dir / "summary.md", summary_markdown(summary))
    if html:
        _write_text(run_dir / "summary.html", summary_html(run_dir, summary))
    return summary


_FLAGPERF_ROUND = re.compile(r"^round(\d+)$")


def is_flagperf_layout(run_dir: Path) -> bool:
    """A FlagPerf results folder: no run.json, and
    ``<case>/round<k>/<ip>_noderank<i>/rank<R>.out.log`` files."""
    if (run_dir / "run.json").is_file():
        return False
    return any(_FLAGPERF_ROUND.match(p.parent.parent.name) and _NODE_DIR.match(p.parent.name)
               for p in run_dir.glob("*/round*/*_noderank*/rank*.out.log"))


def import_flagperf(run_dir: Path) -> list[dict[str, Any]]:
    """Write a round.json into every round folder of a FlagPerf results folder.

    FlagPerf keeps no exit codes, so a round's status comes from rank 0's FINISHED alone; the
    case id is the case folder's name (e.g. ``bert:pytorch_1.8:A100:1:8:1``); the metric is
    guessed from ``final_<metric>`` keys (``guess_metric``).

    Returns:
        The round documents written, in path order.
    """
    documents = []
    for round_dir in sorted(p for p in run_dir.glob("*/round*") if p.is_dir()):
        match = _FLAGPERF_ROUND.match(round_dir.name)
        if not match:
            continue
        hosts = []
        for node in sorted(round_dir.iterdir()):
            found = _NODE_DIR.match(node.name)
            if node.is_dir() and found:
                hosts.append({"host": found["host"], "noderank": int(found["noderank"]),
                              "rc": None, "timed_out": False})
        if not hosts:
            continue
        hosts.sort(key=lambda h: h["noderank"])
        documents.append(finalize_round({
            "run_dir": str(run_dir), "key": f"{round_dir.parent.name}/{round_dir.name}",
            "case_id": round_dir.parent.name, "round": int(match.group(1)), "hosts": hosts,
            "exit_codes_known": False, "metric": None,
        }))
    return documents
