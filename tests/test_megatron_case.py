"""The LLM cases' rules, without training: upstream's loss-curve rule, the verdict of an LLM
round, the parallel layout a configuration asks for, and the FLOPs per token behind MFU. The
rounds themselves train in the local run (tests/test_local_run.py) and the harness's speed
against a plain megatron-core loop is bench/megatron_loop.py's."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import yaml

from driver.megatron.loss_curve import mean_relative_error, read_curve, write_curve
from driver.megatron.model import padded_vocab_size
from flagperf_ansible.config.case_schema import evaluate_formula
from flagperf_ansible.config.cases import load_case
from flagperf_ansible.config.suites import THROUGHPUT_ONLY, round_verdict
from flagperf_host.parallel_layout import Layout

from conftest import ROOT

LLM_CONTRACT = {"kind": "llm", "target": {"metric": "final_loss_curve_error", "comparison": "<=",
                                          "config_key": "target_loss_curve_error"}}


def test_the_curve_error_is_the_mean_relative_error_from_the_first_compared_step():
    reference = {1: 8.0, 2: 6.0, 3: 5.0, 4: 4.0}
    curve = {1: 100.0, 2: 6.6, 3: 4.5, 4: 4.0}
    assert mean_relative_error(curve, reference, from_step=2) == pytest.approx((0.1 + 0.1 + 0) / 3)
    assert mean_relative_error({**curve, 3: math.nan}, reference, 2) == math.inf
    with pytest.raises(ValueError, match="no step from 5"):
        mean_relative_error(curve, reference, from_step=5)


def test_a_curve_file_reads_back_as_written(tmp_path):
    write_curve(tmp_path / "c.json", [1, 2], [7.5, 7.25], source="test")
    assert read_curve(tmp_path / "c.json") == {1: 7.5, 2: 7.25}
    (tmp_path / "bad.json").write_text('{"steps": [1, 2], "loss": [1.0]}')
    with pytest.raises(ValueError, match="bad.json"):
        read_curve(tmp_path / "bad.json")


@pytest.mark.parametrize("finished, verdict", [
    ({"train_iters": 200, "steps_run": 200, "final_loss_curve_error": 0.004,
      "target_loss_curve_error": 0.02}, (True, "")),
    ({"train_iters": 200, "steps_run": 200, "final_loss_curve_error": 0.05,
      "target_loss_curve_error": 0.02},
     (False, "the loss curve is off its reference: loss_curve_error 0.05 is not <= 0.02")),
    ({"train_iters": 200, "steps_run": 200}, (True, THROUGHPUT_ONLY)),
    ({"train_iters": 200, "steps_run": 57, "converged": False}, (False, "ran 57 of 200 steps")),
])
def test_an_llm_round_passes_on_its_steps_and_its_curve(finished, verdict):
    assert round_verdict("training", finished, LLM_CONTRACT) == verdict


def test_the_layout_divides_the_world_and_the_global_batch():
    config = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
              "micro_batch_size": 2, "global_batch_size": 16, "num_layers": 4,
              "num_attention_heads": 4}
    layout = Layout.of(config, 8)
    assert (layout.data, layout.micro_batches) == (2, 4)
    assert Layout.of({**config, "global_batch_size": None}, 8).global_batch == 4
    with pytest.raises(ValueError, match="world size 6 is not a multiple"):
        Layout.of(config, 6)
    with pytest.raises(ValueError, match="global_batch_size 6 is not a multiple"):
        Layout.of({**config, "global_batch_size": 6}, 8)
    with pytest.raises(ValueError, match="num_layers 3 does not divide"):
        Layout.of({**config, "num_layers": 3}, 8)
    assert padded_vocab_size(50257, 128, 1) == 50304 and padded_vocab_size(2048, 128, 2) == 2048


def test_mfu_takes_palm_flops_per_token_of_each_standard_model():
    """GPT-2 345M and Llama 3 8B by hand: per layer the attention projections and the MLP, then
    the output layer, 6 FLOPs per parameter and token, plus 12 L d T for the attention scores."""
    gpt = 24 * (4 * 1024**2 + 2 * 1024 * 4096) + 50257 * 1024
    llama = 32 * (2 * 4096**2 + 2 * 4096 * 128 * 8 + 3 * 4096 * 14336) + 128256 * 4096
    for case, matrices, layers, width, tokens in (("gpt", gpt, 24, 1024, 1024),
                                                  ("llama3_8b", llama, 32, 4096, 8192)):
        loaded = load_case(ROOT, case, "megatron")
        assert loaded.spec.kind == "llm" and loaded.spec.throughput.unit == "tokens"
        value = evaluate_formula(loaded.spec.mfu.flops_per_unit.formula, loaded.standard.params)
        assert value == 6 * matrices + 12 * layers * width * tokens
    # Upstream's 6 x 8e9 per token reads lower than PaLM's count for Llama 3 8B at 8192 tokens.
    assert 6 * 8e9 < 6 * llama + 12 * 32 * 4096 * 8192


def test_the_cpu_profiles_reference_curves_learn():
    for case in ("gpt", "llama3_8b"):
        folder = ROOT / "benchmarks" / case / "megatron"
        profile = {**yaml.safe_load((folder / "config/standard.yaml").read_text())["params"],
                   **yaml.safe_load((folder / "config/cpu.yaml").read_text())["params"]}
        curve = read_curve(folder / profile["reference_curve"])
        assert sorted(curve) == list(range(1, profile["train_iters"] + 1))
        assert curve[1] > math.log(profile["vocab_size"]) - 0.1     # chance over the vocabulary
        assert max(curve[s] for s in range(190, 201)) < curve[1] - 1.5


def test_a_topology_the_llm_profile_does_not_hold_at_is_refused_before_any_host(project):
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "validate", "-i",
                           "inventories/local", "--case",
                           "llama3_8b:megatron:cpu:1:3:1=data/megatron_indexed"],
                          capture_output=True, text=True, cwd=project)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    # The cpu profile holds at 1x1 and 1x2; a layout beyond it is refused as one line.
    assert done.stderr.strip().splitlines()[-1].endswith(
        "not at 1x3 (nnodes x nproc_per_node; config/cpu.yaml profile.scaling)"), done.stderr


def test_the_controller_checks_the_layout_of_an_llm_round():
    from flagperf_ansible.config.cases import check_layout
    from flagperf_ansible.config.casespec import parse_case_spec
    from flagperf_ansible.config.errors import ConfigError

    case = load_case(ROOT, "llama3_8b", "megatron")
    spec = parse_case_spec("llama3_8b:megatron:H100:1:6:1")
    config = {**case.standard.params, "tensor_model_parallel_size": 2,
              "pipeline_model_parallel_size": 1}
    check_layout(case, parse_case_spec("llama3_8b:megatron:H100:1:8:1"), config)
    with pytest.raises(ConfigError, match=r"case llama3_8b:megatron at 1x6: global_batch_size 512 "
                                          r"is not a multiple of micro_batch_size 1 x "
                                          r"data-parallel size 3"):
        check_layout(case, spec, config)
