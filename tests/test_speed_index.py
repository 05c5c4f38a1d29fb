"""The speed index of an LLM case (case.yml ``speed_index``) in the Megatron reproduction
seed's layout: written beside each round's round.json by finalize_round, field by field as
the seed writes it, with rank 0's log masked; and ``export speed-index`` gathering a run's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flagperf_ansible.cli import main
from flagperf_ansible.config.case_schema import CaseFile
from flagperf_ansible.results.provenance import Masker
from flagperf_ansible.results.speed_index import KEYS
from llm_runs import MP, SP, SPEED_INDEX, llm_run

IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")


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
    kept = "12:30:05.123 a[::2] std::vector ::1"
    assert masker.text(kept) == kept
    assert masker.text("peer [2001:db8::1]:29500") == "peer [x::x]:29500"


def test_batch_key_must_be_a_parameter_of_the_case(tmp_path):
    from flagperf_ansible.config.cases import load_case
    from flagperf_ansible.config.errors import ConfigError

    folder = tmp_path / "benchmarks" / "tiny" / "torch"
    (folder / "config").mkdir(parents=True)
    (folder / "run.py").write_text("")
    (folder / "config" / "standard.yaml").write_text("params: {precision: fp32}\n")
    (folder / "case.yml").write_text(
        "suite: diagnostic\ndescription: d\nlauncher: python\nentry: run.py\ntimeout: 10\n"
        "speed_index: {repo: nlp, model: tiny, mission_name: m, direction_id: 1}\n")
    with pytest.raises(ConfigError, match="speed_index.batch_key"):
        load_case(tmp_path, "tiny", "torch")
    (folder / "config" / "standard.yaml").write_text(
        "params: {precision: fp32, micro_batch_size: 4}\n")
    assert load_case(tmp_path, "tiny", "torch").contract()["speed_index"]["batch_key"] == \
        "micro_batch_size"
