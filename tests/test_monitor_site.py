"""End to end through site.yml with the diagnostic case (about 20 s): the round's node dir holds
monitor samples covering the round, and round.json holds the monitor summary."""

import csv
import json
import subprocess

from flagperf_ansible.results.perflog import parse_rank_log


def test_site_yml_round_has_monitor_samples_and_summary(project, tmp_path, venv_env):
    done = subprocess.run(
        ["ansible-playbook", "site.yml", "-i", "inventories/local",
         "-e", f"flagperf_results_dir={tmp_path}",
         "-e", '{"flagperf_cases": ["sleep:pytorch:cpu:1:1:1"], "flagperf_clear_caches": false}'],
        cwd=project, env=venv_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (round_json,) = tmp_path.glob("run*/sleep-pytorch-cpux1x1/round1/round.json")
    document = json.loads(round_json.read_text())
    monitor = document["monitor"]
    assert monitor["status"] == "ok" and monitor["window"]["source"] == "perflog"
    node_dir = round_json.parent / "localhost_noderank0"
    summary = monitor["nodes"]["localhost_noderank0"]
    assert summary["covers_train"] and summary["devices"]["vendor"] == "cpu"
    assert monitor["overall"]["num_trained_samples"] == document["finished"]["num_trained_samples"]

    log = parse_rank_log(node_dir / "rank0.out.log")
    start = log.last("TRAIN_START")["metadata"]["time_ms"]
    end = log.last("TRAIN_END")["metadata"]["time_ms"]
    for stream in ("sys_monitor.csv", "cpu_cores.csv", "device_monitor.csv"):
        with open(node_dir / stream, newline="") as handle:
            stamps = [int(r["timestamp_ms"]) for r in csv.DictReader(handle)]
        # Samples before TRAIN_START and after TRAIN_END, and in between.
        assert stamps[0] <= start and stamps[-1] >= end, stream
        assert any(start < t < end for t in stamps), stream
