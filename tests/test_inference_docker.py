"""The inference suite with runtime docker: the text case on one loopback host, in the cpu
vendor's pytorch image (which carries onnx and onnxruntime), through the wrapper; the local run
(tests/test_local_run.py) runs all four with runtime none, and the GPU check's CPU half an image
case once more. The round exports its model to ONNX and runs it in onnxruntime inside the
container, as the ssh user; the ONNX file is left out of the fetch and stays in the host's round
folder (kept here with flagperf_keep_workdir), and nothing is left running."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import loopback_cluster
from test_cluster import left_behind


ROOT = Path(__file__).resolve().parents[1]
#: The text case: the image cases' export and engine path run in the GPU check's CPU half.
CASES = ("bert_large",)


def test_the_inference_cases_run_in_the_vendor_image(cluster, tmp_path, venv_env):
    data = loopback_cluster.SHARED / "data"
    if not (data / "bert_eval_text" / "eval.txt").is_file():
        done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "data", "prepare",
                               "bert_eval_text", str(data / "bert_eval_text")],
                              capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stderr
    subprocess.run(["chmod", "-R", "a+rX", str(data)], check=True)
    inventory = tmp_path / "inventory"
    shutil.copytree(cluster.inventory, inventory)
    settings_file = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["flagperf_cases"] = [
        {"model": model, "framework": "pytorch", "suite": "inference", "hardware": "cpu",
         "nnodes": 1, "nproc_per_node": 1, "repeat": 1, "timeout": 900,
         "data_dir": str(data / ("bert_eval_text" if model == "bert_large" else "digits"))}
        for model in CASES]
    # Keep the hosts' round folders: the exported models are left out of the fetch, not lost.
    settings["flagperf_keep_workdir"] = True
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    results = tmp_path / "results"
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "run", "-i", str(inventory),
                           "--results-dir", str(results)], cwd=ROOT, capture_output=True,
                          text=True, env={**venv_env, "COLUMNS": "200"}, timeout=3000)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    (run_dir,) = results.glob("run*")
    for model in CASES:
        round_dir = run_dir / f"{model}-pytorch-inference-cpux1x1" / "round1"
        document = json.loads((round_dir / "round.json").read_text())
        assert document["status"] == "passed", document["reason"]
        finished = document["finished"]
        assert finished["paths_run"] == ["validation", "inference"]
        assert finished["compiler"] == "onnxruntime" and finished["device"] == "cpu"
        assert finished["final_acc_gap"] <= finished["target_acc_gap"]
        assert finished["p_inference_core"] >= finished["p_inference_whole"] > 0
        node = round_dir / "node1_noderank0"
        assert (node / "container.log").is_file()
        assert not list(node.glob("*.onnx*"))
    assert left_behind(run_dir.name) == ([], [])
    # The exported models stayed in the hosts' kept round folders, written as the ssh user.
    workdir = Path(settings["flagperf_workdir"]) / run_dir.name
    exported = list(workdir.rglob("*.onnx"))
    assert len(exported) == len(CASES), exported
    uid = loopback_cluster.ensure_user().pw_uid
    assert all(os.stat(p).st_uid == uid for p in exported)
