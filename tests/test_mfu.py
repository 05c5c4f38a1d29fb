"""MFU inputs: the case's FLOPs per unit and the vendor's datasheet peaks, checked at plan time."""


import pytest

from case_model import case_model
from flagperf_ansible.config.cases import load_case
from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.results.mfu import flops_per_unit, round_mfu
from test_validation import GOOD_CASE, plan_for
from unavailable import need_module

A100_CASE = {**GOOD_CASE, "hardware": "A100", "nproc_per_node": 8}


def test_cpu_vendor_has_no_peak_so_no_mfu(scratch_project):
    basis = plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE]})["rounds"][0]["mfu_basis"]
    assert basis["peak_flops_per_device"] is None
    assert basis["reason"] == "the vendor declares no fp32 peak for cpu"
    # scaled from the standard 224x224 to the cpu profile's 16x16 images
    assert basis["flops_per_unit"] == pytest.approx(2.4534e10 * (16 / 224) ** 2)
    assert round_mfu(basis, {"p_train": 100.0})["value"] is None


def test_nvidia_a100_uses_the_datasheet_peak_for_the_precision(scratch_project):
    rounds = plan_for(scratch_project, {"flagperf_vendor": "nvidia",
                                        "flagperf_cases": [A100_CASE]})["rounds"]
    basis = rounds[0]["mfu_basis"]
    assert basis["flops_per_unit"] == pytest.approx(2.4534e10)      # standard 224x224
    assert basis["precision"] == "fp32" and basis["peak_flops_per_device"] == 19.5e12
    assert basis["devices"] == 8 and basis["reason"] == ""
    assert "datasheet" in basis["peak_source"] and "4.089e9" in basis["flops_source"]
    mfu = round_mfu(basis, {"p_train": 2000.0})
    assert mfu["value"] == pytest.approx(2000.0 * 2.4534e10 / (8 * 19.5e12))


def test_amp_maps_to_the_bf16_peak(scratch_project):
    path = scratch_project / "vendors/nvidia/resnet50-pytorch/config/A100x1x8.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("precision: amp\n")
    basis = plan_for(scratch_project, {"flagperf_vendor": "nvidia",
                                       "flagperf_cases": [A100_CASE]})["rounds"][0]["mfu_basis"]
    assert basis["precision"] == "bf16" and basis["peak_flops_per_device"] == 312e12


def test_a_case_emitted_mfu_is_kept():
    record = round_mfu({"reason": "the vendor declares no fp32 peak for cpu"}, {"mfu": 0.41})
    assert record["value"] == 0.41 and record["computed_by"] == "case"


def test_flops_scale_with_the_configured_image_size():
    declared = {"value": 6.0e9, "source": "s", "scale_key": "image_size", "reference": 224,
                "exponent": 2}
    assert flops_per_unit(declared, {"image_size": 112}) == pytest.approx(1.5e9)
    assert flops_per_unit(declared, {}) is None


def test_a_flops_formula_is_arithmetic_over_config_keys():
    """6 N per token plus the attention term (Kaplan et al. 2020, table 1: 6N + 6 n_layer
    n_ctx d_attn), from the configuration; a missing key gives no figure, not a guess."""
    declared = {"formula": "6 * n_params + 6 * layers * seq_len * hidden", "source": "s"}
    config = {"n_params": 1.1e8, "layers": 12, "seq_len": 512, "hidden": 768}
    assert flops_per_unit(declared, config) == pytest.approx(6 * 1.1e8 + 6 * 12 * 512 * 768)
    assert flops_per_unit(declared, {"n_params": 1.0}) is None


@pytest.mark.parametrize("text, where", [
    ("  flops_per_unit: {value: lots, source: x}\n", "mfu.flops_per_unit.value"),
    ("  flops_per_unit: {value: 1.0e+9}\n", "mfu.flops_per_unit.source"),
    ("  flops_per_unit: {value: 1.0e+9, source: x, per: 2}\n", "mfu.flops_per_unit.per"),
    ("  flops_per_unit: {formula: __import__('os'), source: x}\n", "mfu.flops_per_unit"),
    ("  flops_per_unit: {formula: 6 * no_such_key, source: x}\n", "mfu.flops_per_unit.formula"),
])
def test_bad_flops_declaration_names_file_and_key(scratch_project, text, where):
    path = scratch_project / "benchmarks/resnet50/pytorch/case.yml"
    head, _, tail = path.read_text().partition("mfu:\n")
    rest = tail.split("\n# config `precision`", 1)[1]
    path.write_text(head + "mfu:\n" + text + "# config `precision`" + rest)
    with pytest.raises(ConfigError, match=f"benchmarks/resnet50/pytorch/case.yml: {where}"):
        load_case(scratch_project, "resnet50", "pytorch")


def test_bad_peak_names_vendor_file_and_key(scratch_project):
    path = scratch_project / "vendors/nvidia/vendor.yml"
    path.write_text(path.read_text().replace("fp32: 1.95e+13", "fp32: fast"))
    with pytest.raises(ConfigError, match="vendors/nvidia/vendor.yml: datasheet.A100.peak_flops.fp32"):
        plan_for(scratch_project, {"flagperf_vendor": "nvidia", "flagperf_cases": [A100_CASE]})


def test_declared_flops_match_torch_flop_counter_on_the_case_model(project):
    """The declared count is checked against torch's own counter on this case's model (at the
    cpu profile's 32x32 and 10 classes, so it is cheap): training = 3 x forward, within 1 %.
    (tests/test_vision_catalog.py checks every vision case at its standard size.)"""
    torch = need_module("torch", "pip install -e '.[local]'")
    from torch.utils.flop_counter import FlopCounterMode

    model = case_model("resnet50").build_model({"zero_init_residual": False}, 10).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, 3, 32, 32))
    forward = counter.get_total_flops()
    case = load_case(project, "resnet50", "pytorch")
    declared = case.spec.mfu.flops_per_unit.model_dump()
    assert flops_per_unit(declared, {"train_crop_size": 32}) == pytest.approx(3 * forward, rel=0.01)
