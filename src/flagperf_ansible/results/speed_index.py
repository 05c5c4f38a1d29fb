"""An LLM case's speed index, one JSON file per round, in the layout of the Megatron
reproduction seed (003), for the databases that take that seed's files.

A case that declares ``speed_index`` in case.yml (``case_schema.SpeedIndex``) gets, beside
each round's round.json::

    <case_id>/round<k>/
      <model_name>_speed        the index (JSON, the seed's keys in its order)
      train_log/<model_name>    rank 0's log, host names and IPv4/IPv6 addresses masked

``model_name`` is ``<repo>_<model>_<run_mode>_bs<batch>_<precision>_<chips>``, e.g.
``nlp_gpt_sp_bs8_fp32_1``: ``run_mode`` is ``sp`` on one chip and ``mp`` on several,
``batch`` the configuration's ``batch_key`` (the batch per chip, ``micro_batch_size``),
``precision`` the configuration's ``precision`` (fp32 where it sets none: Megatron trains in
fp32 without ``--fp16``/``--bf16``), ``chips`` FINISHED's ``world_size`` (else nnodes x
nproc from the case id). ``FINAL_RESULT`` is FINISHED's ``figure`` (``p_train``: tokens/s over
all chips after the warm-up steps, which it leaves out); a round that did not pass, or wrote
no FINISHED, has ``JOB_FAIL_FLAG`` 1 and ``FINAL_RESULT`` 0. ``log_file`` is the masked log's
path relative to the round folder (``""`` when the round left no rank log).

``export_run`` gathers a run's indexes into one folder, ``index/<name>_speed`` and
``train_log/<name>``, the seed's ``logs/`` layout.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.results.layout import ATTEMPTS, ROUND_FILE, read_optional, read_plan, \
    write_json
from flagperf_ansible.results.perflog import find_rank_logs
from flagperf_ansible.results.provenance import Masker

#: The seed's keys, in its order.
KEYS = ("log_file", "model_name", "mission_name", "direction_id", "run_mode", "index",
        "gpu_num", "FINAL_RESULT", "JOB_FAIL_FLAG", "UNIT")
#: ``index`` of a speed index (the seed: 1 for speed).
SPEED = 1
INDEX_SUFFIX = "_speed"
TRAIN_LOG = "train_log"
_CHIPS = re.compile(r"x(\d+)x(\d+)$")


def _chips(document: Mapping[str, Any]) -> int:
    """The round's chip count: FINISHED's ``world_size``, else nnodes x nproc of its case id."""
    size = (document.get("finished") or {}).get("world_size")
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    found = _CHIPS.search(str(document.get("case_id") or ""))
    return int(found.group(1)) * int(found.group(2)) if found else 1


def _number_text(value: Any) -> str:
    """``8`` for 8 and 8.0, else the value as it is written."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def model_name(spec: Mapping[str, Any], document: Mapping[str, Any]) -> str:
    """``<repo>_<model>_<sp|mp>_bs<batch>_<precision>_<chips>`` of a round (module docstring);
    ``spec`` is the contract's ``speed_index``, ``document`` the round's round.json."""
    config = document.get("config") or {}
    chips = _chips(document)
    batch = _number_text(config.get(spec.get("batch_key") or "micro_batch_size", "unknown"))
    precision = str(config.get("precision") or "fp32")
    return (f"{spec['repo']}_{spec['model']}_{'sp' if chips == 1 else 'mp'}_bs{batch}_"
            f"{precision}_{chips}")


def speed_index(spec: Mapping[str, Any], document: Mapping[str, Any],
                log_file: str) -> dict[str, Any]:
    """The index of one round, the seed's ``KEYS`` in order.

    Args:
        spec: the contract's ``speed_index`` (``case_schema.SpeedIndex`` as a mapping).
        document: the round's round.json.
        log_file: the masked log's path, as the index names it.
    """
    chips = _chips(document)
    value = (document.get("finished") or {}).get(spec.get("figure") or "p_train")
    ok = bool(document.get("passed")) and isinstance(value, (int, float)) \
        and not isinstance(value, bool)
    return {"log_file": log_file, "model_name": model_name(spec, document),
            "mission_name": spec["mission_name"], "direction_id": int(spec["direction_id"]),
            "run_mode": "sp" if chips == 1 else "mp", "index": SPEED, "gpu_num": chips,
            "FINAL_RESULT": value if ok else 0, "JOB_FAIL_FLAG": 0 if ok else 1,
            "UNIT": spec.get("unit") or "tokens/s"}


def rank0_log(round_dir: Path, document: Mapping[str, Any]) -> Path | None:
    """Rank 0's log of the round (its master node's, outside ``attempts/``), or None."""
    logs = [p for p in find_rank_logs(round_dir)
            if ATTEMPTS not in p.relative_to(round_dir).parts]
    master = next((n["dir"] for n in document.get("nodes") or () if n.get("noderank") == 0), None)
    ranked = sorted(logs, key=lambda p: (p.name != "rank0.out.log", p.parent.name != master, p))
    return ranked[0] if ranked else None


def mask_log(source: Path, target: Path, hosts: Iterable[Mapping[str, Any]]) -> None:
    """Copy ``source`` to ``target`` line by line with the hosts' names and addresses
    (``{host, address, label}``, the plan's) and every IPv4 and IPv6 address masked
    (``provenance.Masker``)."""
    masker = Masker(list(hosts), True)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    with open(source, encoding="utf-8", errors="replace") as reader, \
            open(tmp, "w", encoding="utf-8") as writer:
        for line in reader:
            writer.write(masker.text(line))
    tmp.replace(target)


def write_index(round_dir: Path, document: Mapping[str, Any], hosts: Iterable[Mapping[str, Any]],
                base: Path, index_dir: Path, name: str | None = None) -> dict[str, Any] | None:
    """Write a round's index as ``index_dir/<name>_speed`` and its masked log as
    ``base/train_log/<name>`` (``name``: the model name unless given); ``log_file`` is the
    log's path relative to ``base``. None (nothing written) when the round's contract
    declares no ``speed_index``."""
    spec = (document.get("contract") or {}).get("speed_index")
    if not spec:
        return None
    name = name or model_name(spec, document)
    source = rank0_log(round_dir, document)
    log_file = ""
    if source is not None:
        mask_log(source, base / TRAIN_LOG / name, hosts)
        log_file = f"{TRAIN_LOG}/{name}"
    index = speed_index(spec, document, log_file)
    write_json(index_dir / f"{name}{INDEX_SUFFIX}", index)
    return index


def write_round_index(round_dir: Path, document: Mapping[str, Any],
                      hosts: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The round's own index, beside its round.json (``finalize_round`` calls it)."""
    return write_index(round_dir, document, hosts, round_dir, round_dir)


def export_run(run_dir: Path, out_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Write every round's index of a run into ``out_dir`` in the seed's layout
    (``index/<name>_speed``, ``train_log/<name>``), from its round.json files and rank logs.
    Where rounds share a model name (repeats), each is named ``<model_name>_round<k>``.

    Returns:
        ``[(path of the index relative to out_dir, index)]``, in case and round order.

    Raises:
        ConfigError: no such run folder, or no round of a case with a speed index.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError("no such run folder", str(run_dir))
    documents = []
    for path in sorted(run_dir.glob(f"*/round*/{ROUND_FILE}")):
        document = read_optional(path)
        if isinstance(document, dict) and ATTEMPTS not in path.relative_to(run_dir).parts \
                and (document.get("contract") or {}).get("speed_index"):
            documents.append((path.parent, document))
    if not documents:
        raise ConfigError("no round of a case with a speed index (case.yml speed_index, e.g. "
                          "the gpt case) in this run", str(run_dir))
    names = [model_name(d["contract"]["speed_index"], d) for _, d in documents]
    hosts = read_plan(run_dir).get("hosts") or []
    written = []
    for (round_dir, document), name in zip(documents, names):
        if names.count(name) > 1:
            name = f"{name}_round{document.get('round')}"
        index = write_index(round_dir, document, hosts, out_dir, out_dir / "index", name)
        written.append((f"index/{name}{INDEX_SUFFIX}", index))
    return written
