"""The speed index of an LLM case (case.yml ``speed_index``) in the Megatron reproduction
seed's layout: written beside each round's round.json by finalize_round, field by field as
the seed writes it, with rank 0's log masked; and ``export speed-index`` gathering a run's."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from driver import perflog
from flagperf_ansible.cli import main
from flagperf_ansible.config.case_schema import CaseFile
from flagperf_ansible.results.layout import write_run
from flagperf_ansible.results.provenance import Masker
from flagperf_ansible.results.rounds import finalize_round
from flagperf_ansible.results.speed_index import KEYS

SPEED_INDEX = {"repo": "nlp", "model": "gpt", "mission_name": "语义表示", "direction_id": 1,
               "unit": "tokens/s", "figure": "p_train", "batch_key": "micro_batch_size"}
#: The gpt case's contract as CaseDef.contract() gives it, with its speed index.
GPT = {"suite": "training", "metrics": {"final_loss": {"direction": "lower", "unit": "",
                                                       "description": "LM loss"}},
       "target": None, "also_targets": [],
       "throughput": {"figure": "p_train", "unit": "tokens", "count": "num_trained_tokens"},
       "window": ["TRAIN_START", "TRAIN_END"], "data_format": None, "references": [],
       "speed_index": SPEED_INDEX}
HOSTS = [{"host": "gpu-node-a", "address": "10.20.30.40", "label": "host0"}]
IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")


def finished(chips: int, p_train: float) -> dict:
    return {"p_whole": p_train * 0.9, "p_train": p_train, "p_core": p_train * 1.1,
            "tokens_per_chip_per_second": p_train / chips, "num_trained_tokens": 819200,
            "num_trained_samples": 800, "train_iters": 200, "steps_run": 200,
            "warmup_steps": 10, "world_size": chips, "final_loss": 6.2,
            "peak_memory_gib": 7.5, "converged": True}


def llm_run(run_dir: Path, rounds: list[tuple[str, int, float | None, int, dict]]) -> Path:
    """A run of gpt rounds ``(case_id, chips, p_train or None: no FINISHED, rc, config)``,
    each one round on host gpu-node-a, whose rank 0 log names its addresses."""
    cases = sorted({c for c, *_ in rounds})
    plan_rounds = [{"key": f"{c}/round{n}", "case_id": c, "round": n, "suite": "training",
                    "contract": GPT, "profile": None}
                   for c in cases for n in range(1, 1 + sum(r[0] == c for r in rounds))]
    write_run(run_dir, {"vendor": "nvidia", "runtime": "none", "hosts": HOSTS,
                        "cases": [{"case_id": c, "suite": "training", "contract": GPT,
                                   "spec": {}, "profile": None} for c in cases],
                        "rounds": plan_rounds}, {})
    seen: dict[str, int] = {}
    for case, chips, p_train, rc, config in rounds:
        number = seen[case] = seen.get(case, 0) + 1
        node = run_dir / case / f"round{number}" / "gpu-node-a_noderank0"
        node.mkdir(parents=True)
        lines = ["> initializing torch distributed: MASTER_ADDR=10.20.30.40 MASTER_PORT=29500",
                 "[gpu-node-a] NCCL INFO NET/Socket : Using [0]eth0:192.168.1.7<0> "
                 "[1]ib0:fe80::a00:27ff:fe4e:66a1%ib0<0>",
                 " iteration      200/     200 | elapsed time per iteration (ms): 431.2 | "
                 "lm loss: 6.200000E+00 |"]
        stream = io.StringIO()
        log = perflog.PerfLogger(rank=0, stream=stream)
        stream.write("\n".join(lines[:2]) + "\n")
        log.log(perflog.TRAIN_START)
        stream.write(lines[2] + "\n")
        log.log(perflog.TRAIN_END)
        if p_train is not None:
            log.log(perflog.FINISHED, finished(chips, p_train))
        (node / "rank0.out.log").write_text(stream.getvalue())
        finalize_round({"run_dir": str(run_dir), "key": f"{case}/round{number}",
                        "hosts": [{"host": "gpu-node-a", "noderank": 0, "rc": rc,
                                   "timed_out": False}],
                        "config": config, "overrides": {}, "started_ms": 1000,
                        "ended_ms": 2000})
    return run_dir


SP = {"micro_batch_size": 8, "global_batch_size": 8, "precision": "fp32", "seq_length": 1024,
      "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1}
MP = {**SP, "micro_batch_size": 16, "global_batch_size": 128, "precision": "fp16"}


@pytest.fixture
def run(tmp_path) -> Path:
    return llm_run(tmp_path / "run20261201090000", [
        ("gpt-megatron-A100x1x1", 1, 9000.5, 0, SP),
        ("gpt-megatron-A100x1x8", 8, 64000.0, 0, MP),
        ("gpt-megatron-A100x1x8", 8, None, 1, MP)])


def read_index(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_each_round_writes_the_seeds_index_beside_round_json(run):
    sp_round = run / "gpt-megatron-A100x1x1" / "round1"
    index = read_index(sp_round / "nlp_gpt_sp_bs8_fp32_1_speed")
    assert list(index) == list(KEYS) == [
        "log_file", "model_name", "mission_name", "direction_id", "run_mode", "index",
        "gpu_num", "FINAL_RESULT", "JOB_FAIL_FLAG", "UNIT"]
    assert index == {"log_file": "train_log/nlp_gpt_sp_bs8_fp32_1",
                     "model_name": "nlp_gpt_sp_bs8_fp32_1", "mission_name": "语义表示",
                     "direction_id": 1, "run_mode": "sp", "index": 1, "gpu_num": 1,
                     "FINAL_RESULT": 9000.5, "JOB_FAIL_FLAG": 0, "UNIT": "tokens/s"}
    for key in ("direction_id", "index", "gpu_num", "JOB_FAIL_FLAG"):
        assert type(index[key]) is int, key
    round_json = read_index(sp_round / "round.json")
    assert index["FINAL_RESULT"] == round_json["finished"]["p_train"]

    passed = read_index(run / "gpt-megatron-A100x1x8" / "round1" / "nlp_gpt_mp_bs16_fp16_8_speed")
    assert (passed["model_name"], passed["run_mode"], passed["gpu_num"], passed["FINAL_RESULT"],
            passed["JOB_FAIL_FLAG"]) == ("nlp_gpt_mp_bs16_fp16_8", "mp", 8, 64000.0, 0)
    # A round that failed and wrote no FINISHED: chips from the case id, flagged, no speed.
    failed = read_index(run / "gpt-megatron-A100x1x8" / "round2" / "nlp_gpt_mp_bs16_fp16_8_speed")
    assert (failed["gpu_num"], failed["FINAL_RESULT"], failed["JOB_FAIL_FLAG"]) == (8, 0, 1)


def test_the_log_beside_the_index_has_no_address_of_the_raw_log(run):
    round_dir = run / "gpt-megatron-A100x1x1" / "round1"
    raw = (round_dir / "gpu-node-a_noderank0" / "rank0.out.log").read_text()
    masked = (round_dir / "train_log" / "nlp_gpt_sp_bs8_fp32_1").read_text()
    assert {"10.20.30.40", "192.168.1.7"} <= set(IPV4.findall(raw))
    assert not set(IPV4.findall(raw)) & set(IPV4.findall(masked))
    for secret in ("gpu-node-a", "fe80::a00:27ff:fe4e:66a1"):
        assert secret in raw and secret not in masked
    assert "MASTER_ADDR=host0" in masked and "[host0]" in masked
    assert "eth0:x.x.x.x<0>" in masked and "ib0:x::x<0>" in masked
    # Everything else is kept line for line: the iteration line, the PerfLog events.
    assert len(masked.splitlines()) == len(raw.splitlines())
    assert "elapsed time per iteration (ms): 431.2" in masked and '"p_train": 9000.5' in masked


def test_export_gathers_a_runs_indexes_in_the_seeds_layout(run, tmp_path, capsys):
    out = tmp_path / "logs"
    assert main(["export", "speed-index", str(run), "--output", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 and "nlp_gpt_sp_bs8_fp32_1 9000.5 tokens/s" in printed[0]
    assert printed[2].endswith("(failed)")
    # Repeats of one configuration are told apart by their round.
    assert sorted(p.name for p in (out / "index").iterdir()) == [
        "nlp_gpt_mp_bs16_fp16_8_round1_speed", "nlp_gpt_mp_bs16_fp16_8_round2_speed",
        "nlp_gpt_sp_bs8_fp32_1_speed"]
    index = read_index(out / "index" / "nlp_gpt_sp_bs8_fp32_1_speed")
    assert index["log_file"] == "train_log/nlp_gpt_sp_bs8_fp32_1"
    assert "10.20.30.40" not in (out / index["log_file"]).read_text()
    assert read_index(out / "index" / "nlp_gpt_mp_bs16_fp16_8_round2_speed")["JOB_FAIL_FLAG"] == 1


def test_export_refuses_bad_input_in_one_line(tmp_path, capsys):
    assert main(["export", "speed-index", str(tmp_path / "nothing")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no such run folder" in error
    assert main(["export", "speed-index", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no round of a case with a speed index" in error


def test_a_case_without_speed_index_writes_none_and_bad_blocks_are_refused(tmp_path):
    base = {"suite": "diagnostic", "description": "d", "launcher": "python",
            "entry": "run_sleep.py", "timeout": 10}
    assert CaseFile.model_validate(base).speed_index is None
    parsed = CaseFile.model_validate({**base, "speed_index": SPEED_INDEX})
    assert parsed.speed_index.model_dump() == SPEED_INDEX
    with pytest.raises(ValueError, match="direction_id"):
        CaseFile.model_validate({**base, "speed_index": {**SPEED_INDEX, "direction_id": 3}})
    with pytest.raises(ValueError, match="extra"):
        CaseFile.model_validate({**base, "speed_index": {**SPEED_INDEX, "gpu": 1}})


def test_ipv6_masking_leaves_times_and_scopes_alone():
    masker = Masker([], True)
    assert masker.text("12:30:05.123 a[::2] std::vector ::1") == "12:30:05.123 a[::2] std::vector ::1"
    assert masker.text("peer [2001:db8::1]:29500") == "peer [x::x]:29500"
