"""Frameworks other than PyTorch across two hosts: resnet50 on TensorFlow 2 (one worker per node,
TF_CONFIG, MultiWorkerMirroredStrategy) and bert on PaddlePaddle (paddle.distributed.launch) on
the loopback cluster's two sshd hosts with container runtime none, through the wrapper. Prepare
finds each framework's environment on the hosts, where the ssh user's workdir keeps it, and each
node runs its case in it with every node's address from the round. The environments are the
ones the local run and the framework tests use (conftest's ``framework_python``), linked there:
each is built once per machine, and ``test_framework_env`` shows prepare's making of one. Then a
paddle round in the cpu vendor's paddle image (runtime docker).

What the two-host rounds prove is the distribution (two hosts, the framework's launcher, every
rank's samples summed), not the cpu profile's convergence, which the local run trains
(tests/test_local_run.py). So the rounds run from a copy of this checkout whose profiles stop
early: TensorFlow's after one short epoch (SHORT_TF: its full profile takes two workers on two
shared cores from 3 to 15 minutes, by the machine), paddle bert's at the first evaluation
(SHORT_BERT: its full profile trains for hundreds of updates). Their own profiles hold at 1x1
only and refuse 2x1 (``profile.scaling``); the shortened copies drop that with their
baselines."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import loopback_cluster
from flagperf_ansible.run.launch import framework_env_name
from checkout_copy import shorten_profiles
from test_cluster import left_behind


ROOT = Path(__file__).resolve().parents[1]
CASES = {"resnet50-tensorflow2-cpux2x1": ("resnet50", "tensorflow2", "imagenet_tfrecord"),
         "bert-paddle-cpux2x1": ("bert", "paddle", "mlperf_bert_hdf5")}
TF_PROFILE = "benchmarks/resnet50/tensorflow2/config/cpu.yaml"
#: One epoch of 10 updates (640 images, 32 per worker and update), and a target that any
#: evaluated model meets (a constant guess scores about 10 % on the ten digits).
SHORT_TF = {"epochs": 1, "num_train_examples": 640, "target_acc1": 1.0}
BERT_PROFILE = "benchmarks/bert/paddle/config/cpu.yaml"
#: A target the pieces' frequencies meet (always "the" scores 0.045): reached at the first
#: evaluation.
SHORT_BERT = {"target_mlm_accuracy": 0.04}


def checkout_copy(target: Path, edits: dict[str, dict]) -> Path:
    """The files git tracks in this checkout, copied to ``target`` (links kept as links), with
    ``edits`` as :func:`checkout_copy.shorten_profiles` takes them."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source, copy = ROOT / name, target / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, copy)
    return shorten_profiles(target, edits)


def share_environments(framework_python, workdir: Path) -> None:
    """The frameworks' environments of ``framework_python``, linked into ``workdir/envs``
    under the names a plan gives them, for the ssh user to find (read-only) there."""
    user = pwd.getpwnam(loopback_cluster.USER)
    envs = workdir / "envs"
    for folder in (workdir, envs):
        folder.mkdir(exist_ok=True)
        os.chown(folder, user.pw_uid, user.pw_gid)
    for _, framework, _ in CASES.values():
        made = framework_python(framework).parent.parent
        assert made.name == framework_env_name(ROOT, "cpu", framework, [])
        link = envs / made.name
        if not link.exists():
            link.symlink_to(made)


def test_tensorflow2_and_paddle_rounds_span_two_hosts_distribution_only(
        cluster, framework_python, tmp_path, venv_env):
    """Distribution only: shortened profiles (SHORT_TF, SHORT_BERT), their baselines and
    scaling dropped, so their targets prove no learning; their 2x1 convergence is not
    measured, and their own profiles refuse 2x1."""
    # flagperf_python (the hosts' /usr/bin/python3) has neither framework: a passing round ran
    # in the framework's environment.
    for module in ("tensorflow", "paddle"):
        assert subprocess.run(["/usr/bin/python3", "-c", f"import {module}"],
                              capture_output=True).returncode != 0
    data = loopback_cluster.SHARED / "data"
    for _, _, data_format in CASES.values():
        if not (data / data_format / ".prepared").is_file():
            done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "data", "prepare",
                                   data_format, str(data / data_format)],
                                  capture_output=True, text=True, cwd=ROOT)
            assert done.returncode == 0, done.stderr
            (data / data_format / ".prepared").touch()
    subprocess.run(["chmod", "-R", "a+rX", str(data)], check=True)
    inventory = tmp_path / "inventory"
    shutil.copytree(cluster.inventory, inventory)
    settings_file = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["flagperf_container_runtime"] = "none"
    share_environments(framework_python, Path(settings["flagperf_workdir"]))
    settings["flagperf_cases"] = [
        {"model": model, "framework": framework, "hardware": "cpu", "nnodes": 2,
         "nproc_per_node": 1, "repeat": 1, "timeout": 900, "data_dir": str(data / data_format)}
        for model, framework, data_format in CASES.values()]
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    results = tmp_path / "results"
    project = checkout_copy(tmp_path / "project", {TF_PROFILE: SHORT_TF, BERT_PROFILE: SHORT_BERT})
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "run", "-i", str(inventory),
                           "--results-dir", str(results)], cwd=project, capture_output=True,
                          text=True, timeout=3000,
                          env={**venv_env, "COLUMNS": "200", "FLAGPERF_PROJECT_DIR": str(project)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    (run_dir,) = results.glob("run*")

    home = Path(pwd.getpwnam(loopback_cluster.USER).pw_dir)
    for case_id, (model, framework, _) in CASES.items():
        round_dir = run_dir / case_id / "round1"
        document = json.loads((round_dir / "round.json").read_text())
        assert document["status"] == "passed", document["reason"]
        finished = document["finished"]
        assert finished["converged"] is True and finished["world_size"] == 2
        if framework == "tensorflow2":     # the copy's profile ran: 10 updates of 2 x 32
            assert finished["epochs"] == 1 and finished["num_trained_samples"] == 640
        env = home / "work/envs" / framework_env_name(ROOT, "cpu", framework, [])
        assert (env / ".flagperf-env-complete").is_file()
        for noderank, node in enumerate(("node1_noderank0", "node2_noderank1")):
            log = (round_dir / node / f"rank{noderank}.out.log").read_text()
            finished_lines = [json.loads(line.split(" ", 1)[1]) for line in log.splitlines()
                              if line.startswith("[PerfLog] ") and '"FINISHED"' in line]
            assert len(finished_lines) == 1, log[-2000:]
            # Every rank counts the samples of both: the framework's collective summed them.
            assert finished_lines[0]["value"]["num_trained_samples"] == \
                finished["num_trained_samples"]
    names, monitors = left_behind(run_dir.name)
    assert names == [] and monitors == []


def test_a_paddle_round_runs_in_the_vendor_image(cluster, tmp_path, venv_env):
    """Runtime docker: the cpu vendor's paddle image (vendors/cpu/docker_image/paddle, built
    once by prepare from the same requirements.txt as the environment) runs bert on one host."""
    data = loopback_cluster.SHARED / "data" / "mlperf_bert_hdf5"
    if not (data / ".prepared").is_file():
        done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "data", "prepare",
                               "mlperf_bert_hdf5", str(data)], capture_output=True, text=True,
                              cwd=ROOT)
        assert done.returncode == 0, done.stderr
        (data / ".prepared").touch()
    subprocess.run(["chmod", "-R", "a+rX", str(data)], check=True)
    inventory = tmp_path / "inventory"
    shutil.copytree(cluster.inventory, inventory)
    settings_file = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["flagperf_cases"] = [{"model": "bert", "framework": "paddle", "hardware": "cpu",
                                   "nnodes": 1, "nproc_per_node": 1, "repeat": 1,
                                   "timeout": 900, "data_dir": str(data)}]
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    results = tmp_path / "results"
    project = checkout_copy(tmp_path / "project", {BERT_PROFILE: SHORT_BERT})
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "run", "-i", str(inventory),
                           "--results-dir", str(results)], cwd=project, capture_output=True,
                          text=True, timeout=3000,
                          env={**venv_env, "COLUMNS": "200", "FLAGPERF_PROJECT_DIR": str(project)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    (run_dir,) = results.glob("run*")
    round_dir = run_dir / "bert-paddle-cpux1x1" / "round1"
    document = json.loads((round_dir / "round.json").read_text())
    assert document["status"] == "passed", document["reason"]
    assert document["finished"]["converged"] is True
    images = subprocess.run(["docker", "images", "--format", "{{.Repository}}",
                             "flagperf-cpu-paddle"], capture_output=True, text=True, check=True)
    assert "flagperf-cpu-paddle" in images.stdout.split()
    # The container's log holds paddle's own output: the round ran in the image.
    assert (round_dir / "node1_noderank0" / "container.log").is_file()
    names, monitors = left_behind(run_dir.name)
    assert names == [] and monitors == []
