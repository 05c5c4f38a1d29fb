"""Rounds through site.yml on the local inventory, with the diagnostic case: a round of more
than 60 wait slices under a recursion limit about 80 frames above what a round needs (the wait
is a flat loop: no depth that grows with each slice, where a recursion would need several
frames a slice), and a round whose playbook hits an Ansible error, recorded failed with that
error (never as interrupted), its node stopped and its files fetched."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import yaml

from checkout_copy import copy_checkout


CASE = "sleep-pytorch-cpux1x1"
#: Slices the long round lasts at least.
SLICES = 60
#: ansible-playbook's recursion limit for the long round (its workers inherit it). A round's
#: deepest stack (Jinja templating of the settings) needs about 170 frames; a wait that
#: recursed, two frames or more a slice, would need 290 for 60 slices.
RECURSION_LIMIT = 250
#: ``python -c LIMITED LIMIT SCRIPT ARGS...``: SCRIPT run as ``__main__`` at that limit.
LIMITED = ("import runpy, sys; sys.setrecursionlimit(int(sys.argv[1])); sys.argv = sys.argv[2:]; "
           "runpy.run_path(sys.argv[0], run_name='__main__')")


class LocalProject:
    """A copy of the checkout whose diagnostic case takes the given parameters."""

    def __init__(self, tmp_path: Path) -> None:
        self.project = tmp_path / "project"
        self.results = tmp_path / "results"
        copy_checkout(self.project)
        self.env = dict(os.environ, ANSIBLE_CONFIG=str(self.project / "ansible.cfg"),
                        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")

    def run(self, params: dict, slice_s: float, *extra: str,
            recursion_limit: int | None = None) -> subprocess.CompletedProcess:
        """site.yml with the diagnostic case at ``params``; ``recursion_limit``: Python's, in
        ansible-playbook and the workers it forks."""
        folder = self.project / "vendors/cpu/sleep-pytorch/config"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpux1x1.yaml").write_text(yaml.safe_dump(params))
        shutil.rmtree(self.results, ignore_errors=True)
        settings = {"flagperf_cases": [{"model": "sleep", "framework": "pytorch", "hardware": "cpu",
                                        "nnodes": 1, "nproc_per_node": 1, "repeat": 1}],
                    "flagperf_results_dir": str(self.results), "flagperf_wait_slice": slice_s,
                    "flagperf_clear_caches": False}
        argv = ["ansible-playbook", "site.yml", "-i", "inventories/local",
                "-e", json.dumps(settings), *extra]
        if recursion_limit is not None:
            playbook = str(Path(sys.executable).parent / "ansible-playbook")
            argv = [sys.executable, "-c", LIMITED, str(recursion_limit), playbook, *argv[1:]]
        return subprocess.run(argv, cwd=self.project, env=self.env, capture_output=True,
                              text=True, timeout=900)

    def round(self) -> dict:
        (run_dir,) = [p for p in self.results.iterdir() if p.name.startswith("run")]
        return json.loads((run_dir / CASE / "round1" / "round.json").read_text())


def case_processes() -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if any("run_sleep.py" in a for a in p.info["cmdline"] or [])]


def test_a_round_of_60_wait_slices_passes_under_a_low_recursion_limit(ansible_playbook,
                                                                     tmp_path):
    local = LocalProject(tmp_path)
    # What one slice costs here (an exchange with the host and a 10 ms wait there), so that
    # the long round lasts 60 slices whatever this machine's speed.
    done = local.run({"duration": 3.0}, 0.01, recursion_limit=RECURSION_LIMIT)
    assert done.returncode == 0, done.stdout[-3000:]
    short = local.round()
    assert short["status"] == "passed", short["reason"]
    # Where rank 0 is, from its PerfLog, while the wait goes on (the wrapper's bar takes it).
    assert re.search(r"flagperf-progress: \S+: step \d+; \d+ s in", done.stdout), done.stdout[-3000:]
    per_slice = 3.0 / short["nodes"][0]["wait_slices"]
    duration = max(5.0, 1.3 * SLICES * per_slice)

    # A slice's cost varies with the machine's load: where the round took fewer slices than
    # planned, it runs once more, as much longer as its own slices were slower.
    for _ in range(2):
        done = local.run({"duration": duration, "steps": 50}, 0.01,
                         recursion_limit=RECURSION_LIMIT)
        assert done.returncode == 0, done.stdout[-3000:]
        document = local.round()
        assert document["status"] == "passed", document["reason"]
        assert document["wall_time"] >= duration
        slices = document["nodes"][0]["wait_slices"]
        if slices >= SLICES:
            break
        duration *= 1.2 * SLICES / slices
    assert slices >= SLICES, (per_slice, document["nodes"][0])


def test_an_ansible_error_mid_round_fails_the_round_with_that_error(ansible_playbook,
                                                                    tmp_path):
    """The wait's own arguments are broken (an extra var beats the round's value): the task
    fails on the host, the round ends its node (stopped, files fetched) and says why."""
    local = LocalProject(tmp_path)
    done = local.run({"duration": 60.0}, 1, "-e", "launch_wait_slice=soon")
    assert done.returncode == 0, done.stdout[-3000:]     # the round is recorded: the run goes on
    document = local.round()
    assert document["status"] == "failed", document["reason"]
    assert document["reason"].startswith("orchestration error on localhost: Wait for the case:")
    assert "must be numbers" in document["reason"]
    assert document["failed_hosts"] == ["localhost"]
    node = document["nodes"][0]
    assert "rank0.out.log" in node["files"] and "sys_monitor.csv" in node["files"]
    assert case_processes() == []             # the 60 s case was stopped, not left running


def test_an_ansible_error_that_stops_the_playbook_records_the_round_failed(ansible_playbook,
                                                                           tmp_path):
    """An error outside a round's rescue (its record cannot be rendered) stops ansible-playbook
    with the round in flight: the results callback ends the round and records it failed, with
    Ansible's words, not as interrupted."""
    local = LocalProject(tmp_path)
    done = local.run({"duration": 2.0}, 1, "-e", '{"__round_started_ms": "{{ no_such_variable }}"}')
    assert done.returncode != 0
    document = local.round()
    assert document["status"] == "failed", document["reason"]
    assert document["reason"].startswith("orchestration error")
    assert "no_such_variable" in document["reason"], document["reason"]
    assert case_processes() == []
