"""Real run outputs of the diagnostic case through the real playbooks (site.yml), with host
masking on: schemas, provenance, sys_info.json, masking, summary.html, compare."""

import json
import re
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[1]
CASE_ID = "sleep-pytorch-cpux1x1"


def schema(name):
    document = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    return document


@pytest.fixture(scope="module")
def masked_run(ansible_playbook, tmp_path_factory, project):
    """One run of sleep:pytorch:cpu:1:1:3 by ansible-playbook site.yml, flagperf_mask_hosts on."""
    import os

    results = tmp_path_factory.mktemp("results")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["ansible-playbook", "site.yml", "-i", "inventories/local",
         "-e", f"flagperf_results_dir={results}",
         "-e", json.dumps({"flagperf_cases": ["sleep:pytorch:cpu:1:1:3"],
                           "flagperf_mask_hosts": True})],
        cwd=project, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    (run_dir,) = [p for p in results.iterdir() if p.name.startswith("run")]
    return run_dir


def shared_documents(run_dir):
    return [run_dir / "run.json", run_dir / "summary.json", run_dir / "summary.md",
            run_dir / "summary.html", *run_dir.glob("*/round*/round.json"),
            *run_dir.glob("*/round*/*/sys_info.json")]


def test_round_and_summary_validate_against_the_schemas(masked_run):
    rounds = sorted(masked_run.glob(f"{CASE_ID}/round*/round.json"))
    assert len(rounds) == 3
    for path in rounds:
        jsonschema.validate(json.loads(path.read_text()), schema("round"))
    summary = json.loads((masked_run / "summary.json").read_text())
    jsonschema.validate(summary, schema("summary"))
    assert summary["status"] == "passed" and summary["cases"][0]["stats"]["p_whole"]["n"] == 3
    case = summary["cases"][0]
    assert (case["suite"], case["profile"], case["diagnostic"]) == ("diagnostic", None, True)
    document = json.loads(rounds[0].read_text())
    assert (document["suite"], document["passed"]) == ("diagnostic", True)
    assert document["contract"]["window"] == ["TRAIN_START", "TRAIN_END"]


def test_the_schema_rejects_a_wrong_status(masked_run):
    document = json.loads((masked_run / f"{CASE_ID}/round1/round.json").read_text())
    document["status"] = "ok"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema("round"))


def test_masking_leaves_no_host_name_or_address(masked_run):
    assert sorted(p.name for p in masked_run.glob(f"{CASE_ID}/round1/*") if p.is_dir()) == \
        ["host0_noderank0"]
    hostname = socket.gethostname()
    for path in shared_documents(masked_run):
        # Embedded images' base64 (summary.html's plots) hold short names by chance ("vm").
        text = re.sub(r"data:[\w/.+-]+;base64,[A-Za-z0-9+/=]*", "data:", path.read_text())
        assert not re.search(r"(?<![\w.-])localhost(?![\w-])", text), path
        assert not re.search(rf"(?<![\w.-]){re.escape(hostname)}(?![\w-])", text), path
        assert not re.search(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])",
                             text.replace("x.x.x.x", "")), path
    run = json.loads((masked_run / "run.json").read_text())
    assert run["provenance"]["inventory"]["hosts"] == [
        {"host": "host0", "address": "host0", "label": "host0"}]


def test_run_json_records_provenance(masked_run, project):
    provenance = json.loads((masked_run / "run.json").read_text())["provenance"]
    head = subprocess.run(["git", "-C", str(project), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert provenance["git"]["commit"] == head
    assert "site.yml" in provenance["command"] and "-i inventories/local" in provenance["command"]
    assert provenance["versions"]["torch"] == metadata.version("torch")
    assert provenance["versions"]["transformers"] == metadata.version("transformers")
    assert provenance["versions"]["ansible_core"] == metadata.version("ansible-core")
    assert provenance["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert provenance["image"] is None                     # runtime none: no container image


def test_each_node_has_its_sys_info(masked_run):
    for node in masked_run.glob(f"{CASE_ID}/round*/host0_noderank0"):
        info = json.loads((node / "sys_info.json").read_text())
        assert info["hostname"] == "host0" and info["addresses"] == []
        assert info["cpu"]["logical_cores"] >= 1 and info["memory"]["total_bytes"] > 2**20
        assert info["versions"]["torch"] == metadata.version("torch")
        # From the vendor plugin's device_info() (vendors/cpu/monitor.py: the host CPUs).
        accelerators = info["accelerators"]
        assert accelerators["available"] is True and accelerators["vendor"] == "cpu"
        assert accelerators["devices"][0]["memory_total_bytes"] == info["memory"]["total_bytes"]
    document = json.loads((masked_run / f"{CASE_ID}/round2/round.json").read_text())
    assert document["nodes"][0]["sys_info"]["kernel"]


def test_summary_html_is_self_contained_with_plots(masked_run):
    text = (masked_run / "summary.html").read_text()
    images = re.findall(r'<img [^>]*src="([^"]+)"', text)
    # a monitor timeline per round and node; no throughput plot: a diagnostic case's figures
    # are not benchmark results
    assert len(images) == 3
    assert all(src.startswith("data:image/png;base64,") for src in images)
    assert "http://" not in text and "https://" not in text
    assert "diagnostic, not a benchmark result" in text


def test_compare_a_run_with_itself_finds_no_regression(masked_run, tmp_path):
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "compare", str(masked_run),
                           str(masked_run), "--json", str(tmp_path / "c.json")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    p_whole = next(r for r in rows if r["figure"] == "p_whole")
    # The diagnostic suite's figures are never benchmark results: shown, not judged.
    assert p_whole["change_pct"] == 0.0 and p_whole["verdict"] == "not judged"
