"""The vendor datasheet and base figures against it: units, duplex, the entry across nodes, the
base pass rule with figures a device cannot measure, and the report's ratios, formulas and
message-size sweep, on rounds the real driver's PerfLog writer emitted, through finalize_round."""

import pytest

from flagperf_ansible.config.cases import load_case
from flagperf_ansible.config.datasheet import Datasheet, datasheet_basis
from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.results.report import _plot_title, summary_html, summary_markdown
from flagperf_ansible.results.report import write_summary
from flagperf_ansible.config.vendor import load_vendor
from run_outputs import make_suite_run

CONTRACT = {"suite": "base",
            "metrics": {
                "algbw": {"direction": "higher", "unit": "GB/s",
                          "description": "algbw = bytes / time"},
                "busbw": {"direction": "higher", "unit": "GB/s",
                          "description": "busbw = algbw x 2(n-1)/n, n the world size",
                          "datasheet": "interconnect_bandwidth",
                          "datasheet_across_nodes": "network_bandwidth"},
                "tflops_tf32": {"direction": "higher", "unit": "TFLOP/s",
                                "description": "TFLOP/s = iterations x 2MNK / time",
                                "datasheet": "peak_flops.tf32"}},
            "target": None,
            "throughput": {"figure": "busbw", "unit": "bytes", "count": "bytes_moved"},
            "window": ["BENCHMARK_START", "BENCHMARK_END"], "data_format": None}

SHEET = Datasheet.model_validate({
    "peak_flops": {"source": "sheet A", "fp32": "2e13"},
    "interconnect_bandwidth": {"value": 600, "unit": "GB/s", "duplex": "both", "source": "sheet B"},
    "network_bandwidth": {"value": 200, "unit": "Gb/s", "source": "sheet C"},
}).plain()


def test_entries_are_per_device_and_direction_in_base_units():
    assert SHEET["interconnect_bandwidth"]["value"] == pytest.approx(300e9)   # 600 GB/s both ways
    assert SHEET["interconnect_bandwidth"]["quoted"] == "600 GB/s (both directions)"
    assert SHEET["network_bandwidth"]["value"] == pytest.approx(25e9)         # 200 Gb/s = 25 GB/s
    assert SHEET["peak_flops.fp32"]["value"] == pytest.approx(2e13)           # "2e13" read as text
    basis = datasheet_basis(CONTRACT["metrics"], SHEET, "v", "X100", nnodes=1)
    assert basis["busbw"]["spec"] == pytest.approx(300.0) and basis["busbw"]["unit"] == "GB/s"
    assert basis["tflops_tf32"]["spec"] is None
    assert basis["tflops_tf32"]["reason"] == ("vendors/v/vendor.yml states no peak_flops.tf32 "
                                              "for X100")
    assert "algbw" not in basis                                               # compared with nothing
    across = datasheet_basis(CONTRACT["metrics"], SHEET, "v", "X100", nnodes=2)
    assert across["busbw"]["entry"] == "network_bandwidth"
    assert across["busbw"]["spec"] == pytest.approx(25.0)


def test_nvidia_datasheet_states_every_entry_for_each_hardware(project):
    sheets = load_vendor(project, "nvidia")["datasheet"]
    for hardware in ("A100", "H100", "H200"):
        assert {"peak_flops.fp64", "peak_flops.fp32", "peak_flops.tf32", "peak_flops.bf16",
                "peak_flops.fp16", "peak_flops.int8", "memory_bandwidth", "memory_size",
                "host_link_bandwidth", "interconnect_bandwidth", "network_bandwidth"} \
            <= set(sheets[hardware]), hardware
    assert sheets["A100"]["memory_bandwidth"]["value"] == pytest.approx(1555e9)
    assert sheets["H100"]["memory_bandwidth"]["value"] == pytest.approx(3.35e12)
    assert sheets["H200"]["memory_size"]["value"] == pytest.approx(141e9)
    assert load_vendor(project, "cpu")["datasheet"] == {}


@pytest.mark.parametrize("entry, error", [
    ("memory_bandwidth: {value: 1555, unit: GB, source: x}",
     "datasheet.A100.memory_bandwidth: unit 'GB' is not a bandwidth"),
    ("memory_bandwidth: {value: 1555, unit: GBps, source: x}",
     "datasheet.A100.memory_bandwidth: unit 'GBps' is not one of"),
    ("memory_bandwidth: {value: true, unit: GB/s, source: x}",
     "datasheet.A100.memory_bandwidth.value"),
    ("memory_bandwidth: {value: 1555, unit: GB/s}", "datasheet.A100.memory_bandwidth.source"),
    ("memory_speed: {value: 1555, unit: GB/s, source: x}", "datasheet.A100.memory_speed"),
])
def test_a_bad_datasheet_entry_names_vendor_file_and_key(scratch_project, entry, error):
    path = scratch_project / "vendors/nvidia/vendor.yml"
    text = path.read_text()
    start = text.index("    memory_bandwidth:")
    end = text.index("\n", start)
    path.write_text(text[:start] + "    " + entry + text[end:])
    with pytest.raises(ConfigError, match=f"vendors/nvidia/vendor.yml: {error}"):
        load_vendor(scratch_project, "nvidia")


def test_a_figure_in_a_unit_its_entry_cannot_take_names_case_file_and_key(scratch_project):
    path = scratch_project / "benchmarks/resnet50/pytorch/case.yml"
    path.write_text(path.read_text().replace(
        "final_acc1: {direction: higher, unit: \"%\",",
        "final_acc1: {direction: higher, unit: \"%\", datasheet: memory_bandwidth,"))
    with pytest.raises(ConfigError, match="case.yml: metrics.final_acc1: unit '%' "
                                          "cannot be compared with memory_bandwidth"):
        load_case(scratch_project, "resnet50", "pytorch")


def sweep(busbw_at_largest):
    return [{"bytes": 1024, "time_s": 2e-4, "algbw": 0.005, "busbw": 0.005},
            {"bytes": 4096, "time_s": 4e-4, "algbw": busbw_at_largest, "busbw": busbw_at_largest}]


def test_base_figures_against_the_datasheet_sweep_and_formulas_in_the_report(tmp_path):
    basis = datasheet_basis(CONTRACT["metrics"], SHEET, "v", "X100", nnodes=1)
    reason = "TF32 is a tensor-core mode of NVIDIA GPUs"
    make_suite_run(tmp_path, CONTRACT, [
        {"e2e_time": 2.0, "algbw": 90.0, "busbw": 90.0, "not_measured": {"tflops_tf32": reason},
         "sweep": sweep(90.0)},
        {"e2e_time": 2.0, "algbw": 120.0, "busbw": 120.0, "not_measured": {"tflops_tf32": reason},
         "sweep": sweep(120.0)},
    ], datasheet_basis=basis)
    summary = write_summary(tmp_path)
    case = summary["cases"][0]
    assert [r["status"] for r in case["rounds"]] == ["passed", "passed"]
    assert case["rounds"][0]["datasheet"]["busbw"]["ratio"] == pytest.approx(90.0 / 300.0)
    assert case["datasheet"]["busbw"]["ratio"] == pytest.approx(105.0 / 300.0)
    assert case["datasheet"]["tflops_tf32"]["ratio"] is None
    assert case["datasheet"]["tflops_tf32"]["reason"] == f"not measured: {reason}"
    assert case["sweep"]["columns"] == ["algbw", "busbw"]
    assert [(r["bytes"], r["rounds"]) for r in case["sweep"]["rows"]] == [(1024, 2), (4096, 2)]
    assert case["sweep"]["rows"][1]["busbw"] == pytest.approx(105.0)
    text = summary_markdown(summary)
    assert ("- busbw 105 GB/s = 35.0 % of spec (interconnect_bandwidth 300 GB/s per device and "
            "direction; stated: 600 GB/s (both directions); sheet B)") in text
    assert f"- tflops_tf32: no ratio to the datasheet: not measured: {reason}" in text
    assert "- busbw (GB/s): busbw = algbw x 2(n-1)/n, n the world size" in text
    assert "| 4096 | 400 | 105 | 105 | 2 |" in text
    page = summary_html(tmp_path, summary)
    assert 'alt="bandwidth vs message size"' in page and "35.0 % of spec" in page


def test_plots_of_a_profile_say_so_in_their_title():
    case = {"case_id": "c-pytorch-cpux1x1", "profile": {"name": "cpu", "reduced": ["steps"]}}
    assert _plot_title(case, "bandwidth vs message size") == (
        "c-pytorch-cpux1x1: bandwidth vs message size\n"
        "profile: cpu, not the standard configuration (reduced: steps)")
    assert _plot_title({"case_id": "c", "profile": None}, "x") == "c: x"


def test_a_base_figure_not_measured_needs_a_reason_and_one_must_be_measured(tmp_path):
    make_suite_run(tmp_path, CONTRACT, [
        {"e2e_time": 1.0, "algbw": 1.0, "busbw": 1.0, "not_measured": {"tflops_tf32": " "}},
        {"e2e_time": 1.0, "not_measured": {"algbw": "a", "busbw": "b", "tflops_tf32": "c"}},
    ])
    case = write_summary(tmp_path)["cases"][0]
    assert [(r["status"], r["reason"]) for r in case["rounds"]] == [
        ("failed", "FINISHED lacks tflops_tf32 (neither a number nor not_measured with a reason)"),
        ("failed", "no declared figure was measured")]


def test_a_device_s_reported_name_tells_its_datasheet_entry(project):
    from flagperf_ansible.config.vendor import hardware_of_device

    assert hardware_of_device(project, "nvidia", "NVIDIA H200") == "H200"
    assert hardware_of_device(project, "nvidia", "NVIDIA H100 80GB HBM3") == "H100"
    assert hardware_of_device(project, "nvidia", "NVIDIA A100-SXM4-40GB") == "A100"
    # Other boards of a family have other peaks: no entry is theirs.
    assert hardware_of_device(project, "nvidia", "NVIDIA H100 PCIe") is None
    assert hardware_of_device(project, "nvidia", "NVIDIA H200 NVL") is None
    assert hardware_of_device(project, "cpu", "AMD EPYC") is None
