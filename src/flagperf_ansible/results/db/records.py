"""A run read into one plain record for the database, from what ``summarize`` already reads.

Three sources (``read_run``):

* a run of this project (``run.json``): its round.json files, each checked against
  ``schemas/round.schema.json``, gathered by ``summary.build_summary``;
* a FlagPerf results folder: its rank logs, read line by line (``flagperf_import``); the
  vendor from its ``<vendor>_monitor.log`` files, the framework's version from the case key
  (``bert:pytorch_1.8:A100:1:8:1``);
* MLPerf Training logs: a file, or a folder of ``result_<i>.txt`` (``mlperf_import``).

A run that is broken or half written is refused with one ``ConfigError`` line naming the file
and key, before anything is stored: a round that began and has no round.json (in flight, or
cut off: ``summarize`` marks it), a JSON file that does not parse or does not match its
schema, an MLPerf log without ``run_stop``, a folder with no rounds.

Hosts are masked as the summaries mask them (``provenance.Masker``): a host is ``host<i>``, its
index in ``flagperf_hosts`` (FlagPerf's folders: in order of noderank, then address), and no
name or address of a host is stored (reasons are masked, other IPv4 addresses too).

The record: ``{uid, fingerprint, source, run_id, created, vendor, status, path, summary_html,
git_commit, git_dirty, versions, hosts: [...], results: [{..., rounds: [{..., figures,
nodes}]}], published: [...]}``, the columns of ``schema`` by name.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from flagperf_ansible.config.casespec import as_number, parse_case_key
from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.results import mlperf_import
from flagperf_ansible.results.compare import case_direction
from flagperf_ansible.results.flagperf_import import import_flagperf, is_flagperf_layout
from flagperf_ansible.results.layout import ATTEMPTS, ROUND_FILE, ROUND_RECORD, ROUND_START, \
    RUN_FILE, SUMMARY_HTML, read_json
from flagperf_ansible.results.overview import case_row
from flagperf_ansible.results.provenance import Masker, host_label
from flagperf_ansible.results.report import figure_unit
from flagperf_ansible.results.rounds import round_figures
from flagperf_ansible.results.summary import build_summary, profile_label, profile_name

SOURCES = ("flagperf-ansible", "flagperf", "mlperf")
#: The Python package that is a framework's version, as sys_info.json names it.
FRAMEWORK_PACKAGES = {"pytorch": "torch", "tensorflow2": "tensorflow", "paddle": "paddlepaddle",
                      "mindspore": "mindspore"}
#: The energy figure stored beside FINISHED's (round.json ``monitor.overall``).
ENERGY = "energy_per_unit"
_RUN_NAME = re.compile(r"run(\d{14})$")


def read_run(path: Path) -> dict[str, Any]:
    """The record of the run at ``path`` (see the module docstring).

    Raises:
        ConfigError: not a run of a known source, or broken or half written.
    """
    path = Path(path).absolute()
    if not path.exists():
        raise ConfigError("no such run folder or log", str(path))
    record = None
    if path.is_dir() and (path / RUN_FILE).is_file():
        record = _our_run(path)
    elif path.is_dir() and is_flagperf_layout(path):
        record = _flagperf_run(path)
    elif mlperf_import.mlperf_logs(path):
        record = _mlperf_run(path, mlperf_import.mlperf_logs(path))
    if record is not None:
        record["fingerprint"] = fingerprint(record)
        return record
    raise ConfigError("neither a flagperf-ansible run (run.json), a FlagPerf results folder "
                      "(<case>/round<k>/<ip>_noderank<i>/rank<R>.out.log) nor MLPerf Training "
                      f"logs ({mlperf_import.PREFIX} lines)", str(path))


# Our runs ---------------------------------------------------------------------------------
#: JSON Schema's types as Python's (a bool is not an integer or a number).
_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
               "integer": int, "number": (int, float)}


def _round_rules() -> tuple[list[str], dict[str, dict[str, Any]]]:
    """round.json's required keys, and each key's ``type`` and ``enum``, from
    ``schemas/round.schema.json``: what ingest reads; what lies deeper is summarize's to check
    (checking all of it with jsonschema took most of an ingest's time)."""
    from flagperf_ansible.paths import project_dir

    schema = read_json(project_dir() / "schemas" / "round.schema.json")
    return schema["required"], {key: {k: v for k, v in rule.items() if k in ("type", "enum")}
                                for key, rule in schema["properties"].items()}


def _top_level_problem(document: Any, rules: tuple[list[str], dict[str, dict[str, Any]]]
                       ) -> tuple[str, str] | None:
    """``(key, what is wrong)`` with a round document's top level, or None."""
    required, properties = rules
    if not isinstance(document, dict):
        return "(document)", "is not an object"
    for key in required:
        if key not in document:
            return key, "required key is missing"
    for key, rule in properties.items():
        if key not in document:
            continue
        value = document[key]
        if "enum" in rule and value not in rule["enum"]:
            return key, f"{value!r} is not one of {rule['enum']}"
        types = rule.get("type")
        if types is not None:
            allowed = [types] if isinstance(types, str) else types
            if not any(isinstance(value, _JSON_TYPES[t]) and not (
                    isinstance(value, bool) and t in ("integer", "number")) for t in allowed):
                return key, f"{value!r} is not of type {' or '.join(allowed)}"
    return None


def _checked_json(path: Path, rules=None) -> Any:
    """The JSON document at ``path``, refused in one line when it does not parse or (with
    ``rules``, ``_round_rules()``) its top level does not match round.json's schema."""
    try:
        document = read_json(path)
    except (OSError, ValueError) as err:
        raise ConfigError(f"not readable JSON ({err}): broken or half written", str(path)) from None
    if rules is not None:
        problem = _top_level_problem(document, rules)
        if problem is not None:
            raise ConfigError(f"does not match schemas/round.schema.json: {problem[1]}"[:300],
                              str(path), problem[0])
    return document


def our_rounds(run_dir: Path) -> list[dict[str, Any]]:
    """Every round.json of a run, checked; refused where a round began and wrote none.

    Raises:
        ConfigError: see the module docstring.
    """
    begun = {p.parent for name in (ROUND_START, ROUND_RECORD)
             for p in run_dir.glob(f"*/round*/{name}")}
    for round_dir in sorted(begun):
        if not (round_dir / ROUND_FILE).is_file():
            raise ConfigError("this round began and has no round.json: it is in flight, or was "
                              "cut off (`flagperf-ansible summarize RUN_DIR` marks it "
                              "interrupted)", str(round_dir / ROUND_FILE))
    rules = _round_rules()
    return [_checked_json(p, rules) for p in sorted(run_dir.glob(f"*/round*/{ROUND_FILE}"))
            if ATTEMPTS not in p.relative_to(run_dir).parts]


def _our_run(run_dir: Path) -> dict[str, Any]:
    run = _checked_json(run_dir / RUN_FILE)
    for key in ("run_id", "vendor", "cases"):
        if not isinstance(run, dict) or key not in run:
            raise ConfigError("required key is missing", str(run_dir / RUN_FILE), key)
    documents = our_rounds(run_dir)
    if not documents:
        raise ConfigError("no round.json: no round of this run has finished", str(run_dir))
    summary = build_summary(run_dir, documents)
    provenance = run.get("provenance") or {}
    hosts = (provenance.get("inventory") or {}).get("hosts") or []
    git = provenance.get("git") or {}
    specs = {c["case_id"]: c.get("spec") or {} for c in summary["cases"]}
    record = _record(
        "flagperf-ansible", run["run_id"], _iso(run.get("created")), run["vendor"], summary,
        documents, run_dir, lambda case_id: specs.get(case_id) or {}, hosts,
        identity=[run["run_id"], str(run.get("created"))])
    record.update(git_commit=git.get("commit"), git_dirty=git.get("dirty"),
                  versions=provenance.get("versions"))
    return record


# FlagPerf's folders -----------------------------------------------------------------------
def _flagperf_spec(case_id: str) -> dict[str, Any]:
    """A FlagPerf case folder's key as a spec; ``pytorch_1.8`` is pytorch at version 1.8."""
    try:
        spec = parse_case_key(case_id)
    except ValueError:
        return {"model": case_id, "framework": ""}
    framework, _, version = str(spec["framework"]).partition("_")
    return {**spec, "framework": framework, "framework_version": version or None}


def _flagperf_vendor(run_dir: Path) -> str | None:
    """The vendor whose monitor wrote ``<vendor>_monitor.log`` in a node folder (FlagPerf's
    system monitors write ``cpu_``, ``mem_`` and ``pwr_monitor.log`` beside it)."""
    for log in sorted(run_dir.glob("*/round*/*_noderank*/*_monitor.log")):
        name = log.name[:-len("_monitor.log")]
        if name not in ("cpu", "mem", "pwr", "sys"):
            return name
    return None


def _flagperf_run(run_dir: Path) -> dict[str, Any]:
    documents = import_flagperf(run_dir)
    if not documents:
        raise ConfigError("no rounds found in this FlagPerf results folder", str(run_dir))
    summary = build_summary(run_dir, documents)
    # Hosts as FlagPerf names them (addresses), labelled by noderank, then address.
    seen = sorted({(n["noderank"], n["host"]) for d in documents for n in d["nodes"]})
    addresses = list(dict.fromkeys(host for _, host in seen))
    hosts = [{"host": a, "address": a, "label": host_label(i)} for i, a in enumerate(addresses)]
    found = _RUN_NAME.search(run_dir.name)
    created = (datetime.strptime(found.group(1), "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc)
               if found else None)
    logs = sorted(str(p.relative_to(run_dir)) for p in run_dir.glob("*/round*/*/rank*.out.log"))
    record = _record("flagperf", run_dir.name, created, _flagperf_vendor(run_dir), summary,
                     documents, run_dir, _flagperf_spec, hosts, identity=[run_dir.name, *logs])
    record["published"] = catalog_published(record["results"])
    return record


def catalog_published(results: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The figures published for the results' cases as this checkout's catalog declares them
    (case.yml ``references``), for runs that carry no contract (FlagPerf's folders)."""
    from flagperf_ansible.config.cases import load_case
    from flagperf_ansible.paths import project_dir

    cases = []
    for result in {(r["suite"], r["model"], r["framework"]): r for r in results}.values():
        try:
            contract = load_case(project_dir(), result["model"], result["framework"],
                                 result["suite"]).contract()
        except (ConfigError, FileNotFoundError):
            continue                  # not a case of the catalog: nothing published
        cases.append(({"case_id": result["case_key"], "suite": result["suite"],
                       "contract": contract, "figures": None}, result))
    specs = {case["case_id"]: result for case, result in cases}
    return published_of([case for case, _ in cases], lambda case_id: specs[case_id])


# MLPerf logs ------------------------------------------------------------------------------
def _mlperf_run(path: Path, logs: list[Path]) -> dict[str, Any]:
    documents = mlperf_import.import_mlperf(logs)
    info = documents[0]["mlperf"]
    system, nnodes = mlperf_import.platform_nodes(info["platform"])
    spec = {"model": mlperf_import.MODELS.get(info["benchmark"], info["benchmark"]),
            "framework": "", "hardware": system, "nnodes": nnodes, "nproc_per_node": None}
    # A log file's "folder" is one that holds no run.json of another run.
    summary = build_summary(path if path.is_dir() else path.parent / f".{path.name}", documents)
    created = datetime.fromtimestamp(documents[0]["started_ms"] / 1000, timezone.utc)
    identity = [hashlib.sha256(log.read_bytes()).hexdigest() for log in logs]
    record = _record("mlperf", path.stem if path.is_file() else path.name, created,
                     str(info["org"] or "").lower() or None, summary, documents, path,
                     lambda _case: spec, [], identity=identity)
    for result in record["results"]:
        result["chip"] = system
    return record


# The record -------------------------------------------------------------------------------
def _iso(created: Any) -> datetime | None:
    try:
        return datetime.strptime(str(created), "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def _digest(parts: Iterable[str]) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


def _host(sys_info: Mapping[str, Any] | None) -> dict[str, Any]:
    """A host's description from its sys_info.json: CPU, memory, kernel, chip, software."""
    info = sys_info or {}
    devices = (info.get("accelerators") or {}).get("devices") or []
    software = {str(k): str(v) for k, v in (info.get("versions") or {}).items() if v}
    python = (info.get("python") or {}).get("version")
    if python:
        software["python"] = str(python)
    return {"cpu_model": (info.get("cpu") or {}).get("model"),
            "logical_cores": (info.get("cpu") or {}).get("logical_cores"),
            "memory_bytes": (info.get("memory") or {}).get("total_bytes"),
            "kernel": info.get("kernel"),
            "chip": devices[0].get("name") if devices else None,
            "devices": len(devices) or None,
            "driver": devices[0].get("driver") if devices else None,
            "software": software}


def software_label(framework: str, host: Mapping[str, Any] | None,
                   version: str | None = None) -> str:
    """What the leaderboard filters by as the software version: the framework's package and
    version, and the accelerator's driver, e.g. ``torch 2.14.1, driver 550.54.15``; ``""``
    when nothing is known."""
    host = host or {}
    package = FRAMEWORK_PACKAGES.get(framework, framework)
    version = version or (host.get("software") or {}).get(package)
    parts = [f"{package} {version}"] if package and version else []
    if host.get("driver"):
        parts.append(f"driver {host['driver']}")
    return ", ".join(parts)


def _round_figures(document: Mapping[str, Any], case: Mapping[str, Any]) -> dict[str, Any]:
    """``{name: {value, unit, direction}}``: a round's numeric figures (FINISHED, MFU) and its
    energy per unit of work (J per image, sequence, ...) where the monitors measured one."""
    direction = case_direction(dict(case))
    out = {}
    for name, value in round_figures(dict(document)).items():
        number = as_number(value)
        if number is not None and number == number:      # NaN is not a figure
            out[name] = {"value": number, "unit": figure_unit(dict(case), name),
                         "direction": direction(name)}
    overall = (document.get("monitor") or {}).get("overall") or {}
    unit = overall.get("energy_unit")
    energy = as_number(overall.get(f"energy_per_{unit}_j")) if unit else None
    if energy is not None:
        out[ENERGY] = {"value": energy, "unit": f"J/{unit}", "direction": -1}
    return out


def _record(source: str, run_id: str, created: datetime | None, vendor: str | None,
            summary: dict[str, Any], documents: list[dict[str, Any]], path: Path,
            spec_of, plan_hosts: list[Mapping[str, Any]], identity: list[str]) -> dict[str, Any]:
    """The record of a run from its summary and round documents; ``spec_of(case_id)`` gives a
    case's model, framework, hardware, nnodes, nproc_per_node; ``plan_hosts`` the hosts to
    mask (``{host, address, label}``)."""
    masker = Masker(plan_hosts, True)
    labels = {str(h.get(k)): str(h["label"]) for h in plan_hosts for k in ("host", "address")
              if h.get(k)}
    by_case: dict[str, list[dict[str, Any]]] = {}
    for document in documents:
        by_case.setdefault(document["case_id"], []).append(document)
    hosts: dict[str, dict[str, Any]] = {}

    def label_of(node: Mapping[str, Any]) -> str:
        name = str(node.get("host"))
        label = labels.get(name) or (name if re.fullmatch(r"host\d+", name)
                                     else host_label(node.get("noderank") or 0))
        if label not in hosts or (not hosts[label].get("cpu_model") and node.get("sys_info")):
            hosts[label] = {"label": label, **_host(node.get("sys_info"))}
        return label

    results = []
    for case in summary["cases"]:
        spec = spec_of(case["case_id"])
        rounds = sorted(by_case.get(case["case_id"], []), key=lambda d: d["round"])
        round_rows = []
        for document in rounds:
            nodes = [{"label": label_of(n), "noderank": int(n.get("noderank") or 0),
                      "rc": n.get("rc")} for n in document.get("nodes") or []]
            round_rows.append({
                "number": int(document["round"]), "status": document["status"],
                "reason": masker.text(str(document.get("reason") or "")),
                "started_ms": document.get("started_ms"), "ended_ms": document.get("ended_ms"),
                "figures": _round_figures(document, case), "nodes": nodes})
        first_host = next((hosts.get(n["label"]) for r in round_rows for n in r["nodes"]
                           if n["noderank"] == 0), None)
        row = case_row(case)
        framework = str(spec.get("framework") or "")
        config = next((d.get("config") for d in rounds if d.get("config")), None) or {}
        results.append({
            "suite": case["suite"], "model": str(spec.get("model") or case["case_id"]),
            "framework": framework, "case_key": case["case_id"],
            "hardware": spec.get("hardware"),
            "chip": (first_host or {}).get("chip") or spec.get("hardware"),
            "nnodes": spec.get("nnodes"), "nproc_per_node": spec.get("nproc_per_node"),
            "profile": profile_name(case.get("profile")),
            "profile_label": profile_label(case.get("profile")) or None,
            "precision": str(config["precision"]) if config.get("precision") else None,
            "software": software_label(framework, first_host, spec.get("framework_version")),
            "status": case["status"], "rounds_planned": int(case["rounds_planned"]),
            "rounds_passed": int(case["rounds_passed"]),
            "figure": row["figure"], "unit": row["unit"] or "", "metric": row["metric"],
            "comparison": row["comparison"], "target": row["target"], "rounds": round_rows})
    record = {
        "uid": _digest([source, *identity]), "source": source, "run_id": run_id,
        "created": created, "vendor": vendor, "status": summary["status"], "path": str(path),
        "summary_html": str(path / SUMMARY_HTML) if (path / SUMMARY_HTML).is_file() else None,
        "git_commit": None, "git_dirty": None, "versions": None,
        "hosts": sorted(hosts.values(), key=lambda h: h["label"]), "results": results,
        "published": published_of(summary["cases"], spec_of)}
    return record


def published_of(cases: list[Mapping[str, Any]], spec_of) -> list[dict[str, Any]]:
    """The figures published for the run's cases (their contracts' ``references``), each
    ``{suite, model, framework, vendor, hardware, nnodes, nproc_per_node, precision, label,
    source, note, figures: {name: {value, unit}}}``."""
    out = []
    for case in cases:
        spec = spec_of(case["case_id"])
        for reference in (case.get("contract") or {}).get("references") or ():
            out.append({
                "suite": case["suite"], "model": str(spec.get("model") or ""),
                "framework": str(spec.get("framework") or ""),
                **{k: reference[k] for k in ("vendor", "hardware", "nnodes", "nproc_per_node")},
                "precision": reference.get("precision") or "", "label": reference["label"],
                "source": reference["source"], "note": reference.get("note") or "",
                "figures": {name: {"value": float(value),
                                   "unit": figure_unit(dict(case), name)}
                            for name, value in reference["figures"].items()}})
    return out


def fingerprint(record: Mapping[str, Any]) -> str:
    """sha256 of what the record stores (where it was read from aside): equal for the same
    run read twice, different once a round was added or parsed again."""
    content = {k: v for k, v in record.items() if k not in ("uid", "fingerprint", "path",
                                                           "summary_html")}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()
