"""The local run: the main job as the quickstart runs it (``flagperf-ansible run -i
inventories/local``), once per test session (conftest's ``local_run``). Every case of the
inventory runs one round there, and the tests that need a real round read its results.

It starts with the session, in the background (``Background``): it trains on the cores while
the other tests mostly wait on hosts, containers and Ansible. The tests that read it, and those
that time work against other work, run last (conftest's ``pytest_collection_modifyitems``)."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from interrupt import interrupt


@dataclass
class LocalRun:
    """The run's outcome (``done``: its process) and its results folder (``run_dir``)."""
    done: subprocess.CompletedProcess
    run_dir: Path


def prepare_data(project: Path) -> Path:
    """The tiny data sets of the local inventory's cases in the checkout (``data/<format>``),
    as the README's quickstart prepares them (``make data``; here too, for a set it has not)."""
    inventory = yaml.safe_load((project / "inventories/local/group_vars/all.yml").read_text())
    names = sorted({Path(c["data_dir"]).name for c in inventory["flagperf_cases"]
                    if c.get("data_dir")})
    assert "digits" in names and "coco2017" in names, names
    # The Makefile's rule: a set is written again when a generator is newer than its marker.
    newest = max(p.stat().st_mtime for p in project.glob("src/flagperf_ansible/datasets/*.py"))
    for name in names:
        marker = project / "data" / name / ".prepared"
        if marker.is_file() and marker.stat().st_mtime >= newest:
            continue
        done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "data", "prepare", name,
                               f"data/{name}"], cwd=project, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        marker.touch()
    return project / "data"


def only_run_dir(results: Path) -> Path:
    runs = [p for p in results.iterdir() if p.name.startswith("run")]
    assert len(runs) == 1, runs
    return runs[0]


def run_wrapper(*args: str, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``flagperf_ansible run ARGS``'s outcome. Past ``timeout`` seconds the run is interrupted
    as Ctrl-C does (the round in flight stopped and kept, nothing left running, which killing
    the wrapper would not ensure) and the test fails with the run's last output."""
    argv = [sys.executable, "-m", "flagperf_ansible", "run", *args]
    process = subprocess.Popen(argv, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stdout, stderr, _ = interrupt(process, 300)
        pytest.fail(f"the run took over {timeout:g} s and was interrupted:\n"
                    f"{stdout[-3000:]}{stderr[-3000:]}")
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


#: The local run's master port: away from the default (29500) that tests running beside it use.
MASTER_PORT = 29700


class Background:
    """The local inventory's run into ``results``, started at once in a process of its own, its
    output kept in files there (a pipe nobody reads would stall it)."""

    def __init__(self, project: Path, results: Path, env: dict, timeout: float = 3600) -> None:
        prepare_data(project)
        self.results, self.timeout = results, timeout
        self.out, self.err = results / "run.stdout", results / "run.stderr"
        results.mkdir(parents=True, exist_ok=True)
        self.argv = [sys.executable, "-m", "flagperf_ansible", "run", "-i", "inventories/local",
                     "-e", f"flagperf_master_port={MASTER_PORT}",
                     "--results-dir", str(results / "runs")]
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.process = subprocess.Popen(self.argv, cwd=project, env=env, text=True,
                                            stdout=out, stderr=err)
        self.started = time.monotonic()
        self.outcome: LocalRun | None = None

    def wait(self) -> None:
        """Return once the run ended. Past ``timeout`` seconds from its start it is interrupted
        as Ctrl-C does, and the test fails with its last output."""
        left = self.timeout - (time.monotonic() - self.started)
        try:
            self.process.wait(timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"the local run took over {self.timeout:g} s and was interrupted:\n"
                        f"{self.out.read_text()[-3000:]}{self.err.read_text()[-3000:]}")

    def result(self) -> LocalRun:
        """The run, once it ended (``wait``); it must have exited 0."""
        if self.outcome is None:
            self.wait()
            done = subprocess.CompletedProcess(self.argv, self.process.returncode,
                                               self.out.read_text(), self.err.read_text())
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            self.outcome = LocalRun(done, only_run_dir(self.results / "runs"))
        return self.outcome

    def stop(self) -> None:
        """Ctrl-C to a run still going (its round stopped and kept, nothing left running),
        killed if it has not ended 300 s later."""
        if self.process.poll() is None:
            interrupt(self.process, 300)
