"""Published reference figures: case.yml declares them, the plan carries them in the contract,
and the summary sets a round on the same configuration beside them."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from flagperf_ansible.config.cases import load_case
from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.results.report import print_summary, summary_markdown
from flagperf_ansible.results.report import write_summary
from flagperf_ansible.results.summary import build_summary
from run_outputs import CPU_PROFILE, TRAINING, make_run
from test_case_contract import CASE, edit
from test_validation import GOOD_CASE, plan_for

#: One entry as case.yml writes it, indented under ``references:``.
ENTRY = """  - vendor: nvidia
    hardware: A100
    nnodes: 1
    nproc_per_node: 8
    precision: fp32
    figures: {e2e_time: 28661, p_whole: 4475, p_train: 4586, p_core: 4659, final_acc1: 75.0}
    source: "FlagPerf training/nvidia/resnet50-pytorch/README.md (DGX A100 40GB, fp32)"
"""
#: The same reference as CaseDef.contract() carries it.
A100_1X8 = {"vendor": "nvidia", "hardware": "A100", "nnodes": 1, "nproc_per_node": 8,
            "precision": "fp32", "label": "FlagPerf's A100 1x8", "note": "",
            "source": "FlagPerf README (DGX A100 40GB)",
            "figures": {"e2e_time": 50.0, "p_whole": 100.0, "p_train": 80.0, "final_acc1": 75.0}}
SPEC = {"hardware": "A100", "nnodes": 1, "nproc_per_node": 8}


def with_references(project: Path, entries: str) -> None:
    """Replace case.yml's references (the checkout's resnet50 may declare some) by ``entries``."""
    path = project / CASE
    text = path.read_text()
    if "\nreferences:" in text:
        text = text[:text.index("\nreferences:") + 1]
    path.write_text(text + "references:\n" + entries)


@pytest.mark.parametrize("old, new, where, says", [
    ("p_core: 4659", "p_cores: 4659", "references", "'p_cores' is not one of"),
    ("final_acc1: 75.0", "final_acc5: 75.0", "references", "'final_acc5' is not one of"),
    ("p_whole: 4475", "p_whole: -4475", "references", "figure 'p_whole' is -4475: only a metric "
     "declared direction lower"),
    ("final_acc1: 75.0", "final_acc1: 0", "references", "figure 'final_acc1' is 0"),
    ("p_whole: 4475", "p_whole: .nan", "references[0].figures.p_whole", "finite number"),
    ("    precision: fp32\n", "    precision: fp32\n    lable: A100\n", "references[0].lable",
     "unknown key"),
    ("    nproc_per_node: 8\n", "", "references[0].nproc_per_node", "required key is missing"),
])
def test_a_bad_reference_is_one_line_naming_file_and_key(scratch_project, old, new, where, says):
    with_references(scratch_project, ENTRY)
    edit(scratch_project, CASE, old, new)
    with pytest.raises(ConfigError) as caught:
        load_case(scratch_project, "resnet50", "pytorch")
    message = str(caught.value)
    assert message.startswith(f"{CASE}: {where}: "), message
    assert says in message and "\n" not in message


def test_a_reference_needs_its_source(scratch_project):
    with_references(scratch_project, ENTRY.replace(
        '    source: "FlagPerf training/nvidia/resnet50-pytorch/README.md (DGX A100 40GB, fp32)"\n',
        ""))
    with pytest.raises(ConfigError, match=f"^{CASE}: references\\[0\\].source: required key "
                                          "is missing$"):
        load_case(scratch_project, "resnet50", "pytorch")


def test_one_reference_per_vendor_hardware_and_size(scratch_project):
    with_references(scratch_project, ENTRY + ENTRY.replace("precision: fp32", "precision: amp"))
    with pytest.raises(ConfigError, match=f"^{CASE}: references: entry 1 \\(nvidia A100 1x8\\): "
                                          "a second entry"):
        load_case(scratch_project, "resnet50", "pytorch")
    # Another size of the same hardware is another entry.
    with_references(scratch_project, ENTRY + ENTRY.replace("nnodes: 1", "nnodes: 2"))
    labels = [r["label"] for r in load_case(scratch_project, "resnet50", "pytorch")
              .contract()["references"]]
    assert labels == ["FlagPerf's A100 1x8", "FlagPerf's A100 2x8"]


def test_the_plan_carries_the_references_in_the_contract(scratch_project):
    with_references(scratch_project, ENTRY.replace("    source:", "    note: 90 epochs\n"
                                                                  "    label: A100 README\n"
                                                                  "    source:"))
    plan = plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE]})
    reference, = plan["rounds"][0]["contract"]["references"]
    assert reference["label"] == "A100 README" and reference["note"] == "90 epochs"
    assert reference["figures"] == {"e2e_time": 28661, "p_whole": 4475, "p_train": 4586,
                                    "p_core": 4659, "final_acc1": 75.0}
    assert plan["cases"][0]["contract"]["references"] == [reference]


def test_the_checkout_resnet50_reference_loads(project):
    references = load_case(project, "resnet50", "pytorch").contract()["references"]
    a100 = next(r for r in references if (r["vendor"], r["hardware"], r["nnodes"],
                                          r["nproc_per_node"]) == ("nvidia", "A100", 1, 8))
    assert a100["figures"]["p_whole"] == 4475 and a100["precision"] == "fp32"


def test_a_matching_round_is_set_beside_the_published_figures(tmp_path):
    contract = {**TRAINING, "references": [A100_1X8]}
    # Rounds of 10 s and 20 s over 1000 images: p_whole 100 and 50 images/s (driver/finished.py),
    # final_acc1 91.0 each (run_outputs.emit_round).
    run = make_run(tmp_path / "run", [10.0, 20.0], contract=contract, vendor="nvidia",
                   spec=SPEC, config={"image_size": 224, "precision": "fp32"})
    summary = write_summary(run, html=False)
    case, = summary["cases"]
    reference = case["reference"]
    assert reference["label"] == "FlagPerf's A100 1x8" and reference["mismatch"] == ""
    assert list(reference["figures"]) == ["p_whole", "p_train", "final_acc1", "e2e_time"]
    assert reference["ratios"]["p_whole"] == pytest.approx(75.0 / 100.0)
    assert reference["ratios"]["final_acc1"] == pytest.approx(91.0 / 75.0)
    means = {k: case["stats"][k]["mean"] for k in ("p_train", "e2e_time")}
    assert reference["ratios"]["p_train"] == pytest.approx(means["p_train"] / 80.0)
    assert reference["ratios"]["e2e_time"] == pytest.approx(means["e2e_time"] / 50.0)
    # e2e_time follows the round's seconds (emit_round pins the process start 1 s earlier).
    assert reference["ratios"]["e2e_time"] == pytest.approx(16.0 / 50.0, abs=0.02)

    line = (f"vs FlagPerf's A100 1x8 (fp32, FlagPerf README (DGX A100 40GB)): p_whole 0.75 x, "
            f"p_train {means['p_train'] / 80.0:.2f} x, final_acc1 1.21 x, "
            f"e2e_time {means['e2e_time'] / 50.0:.2f} x (lower is better).")
    assert line in (run / "summary.md").read_text().splitlines()
    console = Console(record=True, width=200)
    print_summary(summary, console)
    assert line in console.export_text()


def test_another_precision_is_matched_and_said(tmp_path):
    run = make_run(tmp_path / "run", [10.0], contract={**TRAINING, "references": [A100_1X8]},
                   vendor="nvidia", spec=SPEC, config={"precision": "amp"})
    reference = build_summary(run)["cases"][0]["reference"]
    assert reference["mismatch"] == "precision amp, the reference ran fp32"
    assert reference["ratios"]["p_whole"] == pytest.approx(1.0)
    assert "; precision amp, the reference ran fp32." in summary_markdown(build_summary(run))


def test_a_reference_without_a_precision_is_never_a_mismatch(tmp_path):
    """A memory size or a link's bandwidth has no arithmetic precision: none is declared, and
    whatever the round's configuration says, nothing is called a mismatch."""
    reference = {**A100_1X8, "precision": ""}
    run = make_run(tmp_path / "run", [10.0], contract={**TRAINING, "references": [reference]},
                   vendor="nvidia", spec=SPEC, config={"precision": "amp"})
    summary = build_summary(run)
    assert summary["cases"][0]["reference"]["mismatch"] == ""
    assert ("vs FlagPerf's A100 1x8 (FlagPerf README (DGX A100 40GB)): p_whole 1.00 x"
            in summary_markdown(summary))


@pytest.mark.parametrize("vendor, spec, profile", [
    ("nvidia", {**SPEC, "nproc_per_node": 4}, None),   # another size
    ("nvidia", {**SPEC, "hardware": "H100"}, None),    # other hardware
    ("cpu", SPEC, None),                               # another vendor
    ("nvidia", SPEC, CPU_PROFILE),                     # a profile, not the standard recipe
])
def test_no_reference_unless_vendor_hardware_size_and_configuration_match(tmp_path, vendor,
                                                                         spec, profile):
    run = make_run(tmp_path / "run", [10.0], contract={**TRAINING, "references": [A100_1X8]},
                   vendor=vendor, spec=spec, profile=profile)
    summary = build_summary(run)
    assert summary["cases"][0]["reference"] is None
    markdown = summary_markdown(summary)
    assert "vs FlagPerf" not in markdown
    # The published figures are still there, as context, with no ratio.
    why = ("this ran profile: cpu" if profile else "not this configuration")
    assert (f"For context only, no ratio ({why}" in markdown
            and "FlagPerf's A100 1x8 (fp32): e2e_time 50 s, p_whole 100 images/s" in markdown)
    assert " x," not in markdown.split("For context only", 1)[1].split("\n", 1)[0]


def test_a_contract_without_references_has_none(tmp_path):
    """Contracts written before references were kept (run_outputs' TRAINING) have no key."""
    assert "references" not in TRAINING
    run = make_run(tmp_path / "run", [10.0], vendor="nvidia", spec=SPEC)
    assert build_summary(run)["cases"][0]["reference"] is None
