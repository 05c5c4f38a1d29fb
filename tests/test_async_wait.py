"""The container role's wait (roles/container/files/async_wait.py), run for real as
flagperf.benchmark.piped_script runs it, on results files shaped as Ansible's async wrapper
writes them; its reports read by the round's wait logic as async_status results."""

import json
import subprocess
import sys
import threading
from pathlib import Path

from flagperf_ansible.round_wait import job_status, node_failed, node_finished, node_rc

ASYNC_WAIT = Path(__file__).resolve().parents[1] / "roles" / "container" / "files" / "async_wait.py"


def wait(results_file: Path, seconds: float, *extra: str) -> dict:
    """One wait step; the result as piped_script registers it."""
    done = subprocess.run([sys.executable, "-", "--results-file", str(results_file),
                           "--seconds", str(seconds), *extra], input=ASYNC_WAIT.read_text(),
                          capture_output=True, text=True, timeout=60)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "changed": True}


def write_atomically(path: Path, document: dict) -> None:
    """As the async wrapper does (a temporary file, then a rename)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(document))
    tmp.rename(path)


def test_a_running_job_is_reported_running_after_the_slice(tmp_path):
    job = tmp_path / "j123.456"
    write_atomically(job, {"started": True, "finished": False, "ansible_job_id": job.name})
    poll = wait(job, 0.3)
    assert poll["rc"] == 0
    assert job_status(poll)["finished"] is False and not node_finished(poll)


def test_the_job_result_is_returned_as_soon_as_the_job_ends(tmp_path):
    job = tmp_path / "j123.457"
    write_atomically(job, {"started": True, "finished": False, "ansible_job_id": job.name})
    result = {"changed": True, "status": 3, "container": {"Output": "rank 0 failed\n",
                                                          "State": {"ExitCode": 3}}}
    threading.Timer(0.5, write_atomically, (job, result)).start()
    # A 600 s slice: waiting it out would run into wait()'s 60 s limit.
    poll = wait(job, 600)
    status = job_status(poll)
    assert status["finished"] is True and status["ansible_job_id"] == job.name
    assert status["container"]["Output"] == "rank 0 failed\n"
    assert node_finished(poll) and node_rc(poll) == 3 and node_failed(poll)


def test_a_job_killed_at_its_limit_and_a_missing_job_are_failed_and_finished(tmp_path):
    job = tmp_path / "j123.458"
    write_atomically(job, {"msg": "Timeout exceeded", "failed": True, "child_pid": 42})
    killed = wait(job, 5)
    assert node_finished(killed) and node_failed(killed) and node_rc(killed) is None
    missing = wait(tmp_path / "j0.0", 5)
    assert node_finished(missing) and node_failed(missing)
    assert job_status(missing)["msg"] == "could not find job"


def test_remove_clears_the_results_file_of_an_ended_job_only(tmp_path):
    running, ended = tmp_path / "j123.459", tmp_path / "j123.460"
    write_atomically(running, {"started": True, "finished": False, "ansible_job_id": running.name})
    write_atomically(ended, {"changed": True, "status": 0, "container": {"Output": ""}})
    assert not node_finished(wait(running, 0, "--remove"))
    assert running.exists()
    poll = wait(ended, 0, "--remove")
    assert node_finished(poll) and node_rc(poll) == 0 and not node_failed(poll)
    assert not ended.exists()
