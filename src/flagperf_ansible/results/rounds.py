"""A round's result: its status by its suite's pass rule, and its ``round.json``.

A round is parsed from its outcome as the round's play handed it over (hosts, exit codes,
times), joined with what the run's plan.json says of it (case, configuration, suite, contract,
profile: ``layout.planned_round``) into ``round_record.json``, and from the rank logs fetched
into its node folders. FlagPerf's folders have neither plan nor record and are judged as
training rounds by the case's own ``converged`` claim.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

from flagperf_ansible.results.layout import ATTEMPTS, ROUND_FILE, ROUND_RECORD, ROUND_START, SYS_INFO, \
    earlier_attempts, planned_round, read_optional, read_plan, write_json
from flagperf_ansible.config.datasheet import round_datasheet
from flagperf_ansible.results.mfu import round_mfu
from flagperf_ansible.results.monitoring import summarize_round
from flagperf_ansible.results.perflog import find_rank_logs, parse_rank_log
from flagperf_ansible.results.provenance import Masker, node_dir_name
from flagperf_ansible.results.speed_index import write_round_index
from flagperf_ansible.config.suites import round_verdict, suite as suite_of


def round_status(hosts: list[dict[str, Any]], finished: dict[str, Any] | None,
                 interrupted: bool = False, exit_codes_known: bool = True,
                 error: str = "", suite: str | None = None,
                 contract: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """``(status, reason)`` of a round from its hosts' launch results and rank 0's FINISHED.

    ``hosts`` items carry ``host``, ``rc`` (None when unknown), ``timed_out``, and optionally
    ``stopped`` (still running when the round ended: stopped), ``lost`` (the host left the
    run, e.g. unreachable) and ``error`` (an orchestration error on that host: a task that
    failed there). ``error`` is one that stopped the whole run mid-round (Ansible's own). Only
    Ctrl-C or SIGTERM make a round ``interrupted``; an orchestration error makes it
    ``failed`` with that error as its reason. A node that failed comes first in the reason;
    the nodes stopped because of it are named after. With ``exit_codes_known`` False
    (FlagPerf's folders keep no exit codes) only FINISHED counts. A round that ran to
    FINISHED passes by its suite's rule (``suites.round_verdict`` on ``suite`` and the case's
    ``contract``; training by ``converged`` when both are None).
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
    passed, reason = round_verdict(suite, finished, contract)
    return ("passed", reason) if passed else ("failed", reason)


#: What round.json takes of the plan's round (``plan.build_plan``).
PLANNED = ("case_id", "round", "metric", "diagnostic", "suite", "contract", "profile", "config",
           "overrides", "vendor_config", "mfu_basis", "datasheet_basis")


def _with_plan(record: dict[str, Any]) -> dict[str, Any]:
    """The round's outcome (key, times, hosts' outcomes) joined with what the run's plan.json
    says of the round (``PLANNED``) and of its hosts (``mask_hosts``, ``plan_hosts``); what the
    record holds itself wins (a kept round_record.json). Without a plan (a round written by
    hand), the case and round come from the key and the suite is training or diagnostic."""
    record = dict(record)
    plan = read_plan(Path(record["run_dir"]))
    planned = planned_round(plan, record["key"])
    for name in PLANNED:
        if name not in record and name in planned:
            record[name] = planned[name]
    record.setdefault("mask_hosts", bool(plan.get("mask_hosts")))
    record.setdefault("plan_hosts", plan.get("hosts") or [])
    record.setdefault("case_id", record["key"].split("/")[0])
    record.setdefault("round", int(record["key"].rsplit("round", 1)[-1]))
    record.setdefault("contract", None)
    record.setdefault("profile", None)
    if not record.get("suite"):
        record["suite"] = "diagnostic" if record.get("diagnostic") else "training"
    return record


def parse_round(record: dict[str, Any]) -> dict[str, Any]:
    """The round document of one round, from its record and fetched files; nothing is written.

    Args:
        record: as ``finalize_round`` takes it.

    Returns:
        The document that ``finalize_round`` writes as round.json.
    """
    round_dir = Path(record["run_dir"]) / record["key"]
    record = _with_plan(record)
    mask = bool(record.get("mask_hosts"))
    suite_name, contract = record["suite"], record.get("contract")
    contract_map = contract or {}
    window = contract_map.get("window") or suite_of(suite_name).window
    ranks: dict[str, Any] = {}
    bad_lines = 0
    events_by_rank = []
    for path in find_rank_logs(round_dir):
        if ATTEMPTS in path.relative_to(round_dir).parts:
            continue
        # Line by line, keeping the window's events and FINISHED: memory stays flat.
        log = parse_rank_log(path, keep=window)
        bad_lines += log.bad_lines
        events_by_rank.append(log.events)
        if log.rank is not None:
            ranks[str(log.rank)] = log.finished
    finished = ranks.get("0")
    hosts = list(record.get("hosts") or [])
    known = record.get("exit_codes_known", True) is not False
    interrupted = bool(record.get("interrupted"))
    status, reason = round_status(hosts, finished, interrupted, known,
                                  str(record.get("error") or ""), suite_name, contract)
    nodes = []
    for host in hosts:
        node = round_dir / node_dir_name(host["host"], int(host["noderank"]), mask)
        nodes.append({
            "host": host["host"], "noderank": int(host["noderank"]), "rc": host.get("rc"),
            "timed_out": bool(host.get("timed_out")), "stopped": bool(host.get("stopped")),
            "lost": bool(host.get("lost")), "error": str(host.get("error") or ""),
            "wait_slices": host.get("wait_slices"), "dir": node.name,
            "files": sorted(p.name for p in node.iterdir()) if node.is_dir() else [],
            "sys_info": read_optional(node / SYS_INFO),
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
        "passed": status == "passed",
        "converged": bool(finished and finished.get("converged") is True),
        "suite": suite_name,
        "diagnostic": bool(record.get("diagnostic")) or suite_name == "diagnostic",
        "profile": record.get("profile"),
        "contract": contract,
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
        # Inference: what the vendor's configurations file changed and added (seed 004).
        "vendor_config": record.get("vendor_config") or None,
        "monitor": summarize_round(round_dir, [n["dir"] for n in nodes], events_by_rank,
                                   finished, ended, window=window,
                                   throughput=contract_map.get("throughput")),
        "mfu": round_mfu(record.get("mfu_basis"), finished),
        "datasheet": round_datasheet(record.get("datasheet_basis"), finished),
    }
    if record.get("slurm"):
        # Backend slurm: the round's job (its id, nodes, partition, state, time in the queue).
        document["slurm"] = record["slurm"]
    attempts = earlier_attempts(round_dir)
    if attempts:
        document["attempts"] = attempts
    return Masker(record.get("plan_hosts") or [], mask)(document)


def finalize_round(record: dict[str, Any]) -> dict[str, Any]:
    """Join one round's outcome with the run's plan, keep the joined record as
    ``round_record.json``, parse the fetched rank logs and write ``round.json``.

    Args:
        record: the round's outcome as the round's play hands it over: ``run_dir``, ``key``
            (``<case_id>/round<k>``), ``hosts`` (each ``host``, ``noderank``, ``rc``,
            ``timed_out``, ``stopped``, ``lost``, ``error``), ``started_ms``, ``ended_ms``,
            ``interrupted``, ``error`` (an orchestration error that stopped the run
            mid-round), optionally ``exit_codes_known`` (default True) and ``slurm`` (backend
            slurm: the round's job, ``round_wait.slurm_job_record``, kept as round.json's
            ``slurm``); the rest (``PLANNED``:
            case, configuration, suite, contract, profile, ``mfu_basis``, ``datasheet_basis``;
            ``mask_hosts``, ``plan_hosts``) comes from plan.json where the record lacks it.

    Returns:
        The round document written (see DESIGN.md; schema in ``schemas/round.schema.json``),
        host names and addresses masked when ``mask_hosts``: the hosts' ``status`` and
        ``reason``, ``passed`` by the suite's rule (``round_status``), ``suite``, ``profile``
        (None on the standard configuration) and ``contract`` (what the round is judged by),
        FINISHED of rank 0 and of each rank, nodes, ``monitor``
        (``monitoring.summarize_round`` over the contract's window), ``mfu`` and ``datasheet``
        (each compared base figure over the vendor's datasheet). A case with a
        ``speed_index`` also gets its index and masked log beside it (``speed_index``).
    """
    round_dir = Path(record["run_dir"]) / record["key"]
    record = _with_plan(record)
    start = read_optional(round_dir / ROUND_START) or {}
    if record.get("interrupted") or not record.get("started_ms"):
        record["started_ms"] = start.get("started_ms") or record.get("started_ms")
    record.setdefault("ended_ms", int(time.time() * 1000))
    # The raw input is kept beside the logs: `summarize` parses the round again from both.
    write_json(round_dir / ROUND_RECORD,
               Masker(record.get("plan_hosts") or [], bool(record.get("mask_hosts")))(
                   {k: v for k, v in record.items() if k != "run_dir"}))
    document = parse_round(record)
    write_json(round_dir / ROUND_FILE, document)
    # An LLM case's speed index in the Megatron reproduction seed's layout, where declared.
    write_round_index(round_dir, document, record.get("plan_hosts") or [])
    return document


def refinalize_round(round_dir: Path) -> dict[str, Any] | None:
    """Parse a round again from its raw artifacts (``round_record.json`` and the fetched files)
    into ``round.json``; None when the round has no record (e.g. a FlagPerf folder)."""
    record = read_optional(round_dir / ROUND_RECORD)
    if not isinstance(record, dict):
        return None
    record["run_dir"] = str(round_dir.parent.parent)
    return finalize_round(record)


def reparse_rounds(run_dir: Path) -> int:
    """Write every round.json of a run again from raw artifacts (``refinalize_round``); a round
    that began but left neither record nor round.json (its run was killed) is written as
    ``interrupted``. Returns the number of rounds written."""
    count = 0
    for start in sorted(run_dir.glob(f"*/round*/{ROUND_START}")):
        round_dir = start.parent
        if refinalize_round(round_dir) is not None:
            count += 1
        elif not (round_dir / ROUND_FILE).is_file():
            finalize_round({"run_dir": str(run_dir), "key": f"{round_dir.parent.name}/{round_dir.name}",
                            "interrupted": True, "hosts": []})
            count += 1
    return count


def guess_metric(finished: dict[str, Any] | None) -> str | None:
    """The case metric from FINISHED's ``final_<metric>`` keys (for logs with no plan): the
    first one that is not the loss, else ``loss``; None without any."""
    names = [k[len("final_"):] for k in (finished or {}) if k.startswith("final_")]
    return next((n for n in names if n != "loss"), names[0] if names else None)


def round_figures(document: dict[str, Any]) -> dict[str, Any]:
    """A round's figures for statistics: FINISHED plus the controller's ``mfu`` if computed."""
    figures = dict(document.get("finished") or {})
    mfu = (document.get("mfu") or {}).get("value")
    if "mfu" not in figures and isinstance(mfu, (int, float)):
        figures["mfu"] = mfu
    return figures
