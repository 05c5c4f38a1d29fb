"""The launcher registry (flagperf_ansible.config.launchers): each launcher's argv and environment for
every node of a round, and real rounds of every launcher (torchrun and plain python: two nodes
doing a gloo all_reduce on 127.0.0.1; binary: a shell script entry; paddle in the framework's
environment, as runtime none runs it: conftest's framework_python; torchrun and paddle running a
case through the driver's one entry, ``python -m driver.run``). tf_config and msrun start
their workers for real in the resnet50 cases' two-worker tests (tests/test_resnet50_tensorflow2.py,
tests/test_resnet50_mindspore.py), through the same launch_argv and launch_env."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flagperf_ansible.config.launchers import LAUNCHERS, get_launcher, launch_argv, launch_env, \
    worker_endpoints
from unavailable import need_module

ROOT = "/opt/flagperf"
CHECKOUT = Path(__file__).resolve().parents[1]
OUT = "/var/tmp/flagperf/run1/x/round1/node_noderank0"
DATA = "/data/some set"
PORT = 29555
NODES = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def plan_round(launcher: str, nodes: list[str] = NODES, nproc: int = 2, **more) -> dict:
    """A round as build_plan gives it, the fields a launcher reads."""
    return {"launcher": launcher, "entry": "benchmarks/m/fw/run.py", "nnodes": len(nodes),
            "nproc_per_node": nproc, "nodes": list(nodes), "master_addr": nodes[0],
            "env": {}, "vendor_dir": "vendors/acme", "python": "/usr/bin/python3.10",
            "model": "m", "framework": "fw", "case_dir": "benchmarks/m/fw", **more}


def driver_round(launcher: str, nodes: list[str] = NODES, nproc: int = 2, **more) -> dict:
    """A round of a case whose case.yml names a driver: no entry file."""
    return plan_round(launcher, nodes, nproc, **{"entry": None, **more})


def argv_of(round_: dict, noderank: int, python: str = "py") -> list[str]:
    return launch_argv(round_, noderank, python, ROOT, OUT, DATA, PORT)


def script_of(round_: dict) -> list[str]:
    """What every launcher runs: the entry (or the driver's one entry with the case folder)
    and the case's own arguments."""
    run = [f"{ROOT}/{round_['entry']}"] if round_["entry"] else \
        ["-m", "driver.run", "--case", f"{ROOT}/{round_['case_dir']}"]
    return [*run, "--config", f"{OUT}/config.yaml", "--output_dir", OUT, "--data_dir", DATA]


def option(argv: list[str], name: str) -> str:
    """The value after ``name`` in ``argv`` (the one occurrence)."""
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


# --- the registry ------------------------------------------------------------------------

def test_the_registry_has_every_launcher_by_its_case_yml_name():
    assert set(LAUNCHERS) == {"torchrun", "python", "paddle", "tf_config", "msrun", "binary"}
    assert all(get_launcher(name).name == name for name in LAUNCHERS)


def test_an_unknown_launcher_is_an_error_naming_the_known_ones():
    for build in (lambda r: argv_of(r, 0), lambda r: launch_env(r, 0, ROOT, PORT)):
        with pytest.raises(ValueError) as err:
            build(plan_round("mpirun"))
        assert "'mpirun'" in str(err.value)
        assert all(name in str(err.value) for name in LAUNCHERS)


def test_the_filters_give_the_registrys_argv_and_env_and_refuse_an_unknown_launcher():
    from ansible.errors import AnsibleFilterError
    from filter_plugins_loader import load_filters

    filters = load_filters()
    round_ = plan_round("tf_config")
    assert filters["flagperf_launch_argv"](round_, "1", "py", ROOT, OUT, DATA, str(PORT)) \
        == argv_of(round_, 1)
    assert filters["flagperf_launch_env"](round_, "1", ROOT, str(PORT), {"A": 1}) \
        == launch_env(round_, 1, ROOT, PORT, {"A": "1"})
    with pytest.raises(AnsibleFilterError, match="unknown launcher 'nope'"):
        filters["flagperf_launch_argv"](plan_round("nope"), 0, "py", ROOT, OUT, DATA, PORT)
    with pytest.raises(AnsibleFilterError, match="unknown launcher 'nope'"):
        filters["flagperf_launch_env"](plan_round("nope"), 0, ROOT, PORT)


def test_the_container_runs_the_launcher_under_the_rounds_interpreter(project):
    """Runtime docker: the image's interpreter is the round's python (vendor.yml), not a
    literal; the launch role (runtime none) takes the framework's environment where it has one
    (launch_case_python), else launch_python."""
    import yaml

    step = yaml.safe_load((project / "roles/container/vars/main.yml").read_text())
    command = " ".join(step["_container_start_step"]["input_module"]["args"]["command"].split())
    assert "flagperf_launch_argv(container_noderank, container_round.python," in command
    assert "'python3'" not in command
    launch = yaml.safe_load((project / "roles/launch/vars/main.yml").read_text())
    assert "flagperf_launch_argv(launch_noderank, launch_case_python or launch_python," in \
        " ".join(launch["_launch_start_step"]["argv"].split())


# --- argv of each launcher ---------------------------------------------------------------

def test_torchrun_is_standalone_on_one_node():
    round_ = plan_round("torchrun", nodes=["node1"], nproc=8)
    argv = argv_of(round_, 0)
    assert argv == ["py", "-m", "torch.distributed.run", "--nproc_per_node", "8", "--standalone",
                    *script_of(round_)]


def test_torchrun_on_many_nodes_meets_at_noderank_0_with_each_nodes_rank():
    round_ = plan_round("torchrun")
    for noderank in range(3):
        argv = argv_of(round_, noderank)
        assert argv[:3] == ["py", "-m", "torch.distributed.run"]
        assert option(argv, "--nnodes") == "3"
        assert option(argv, "--node_rank") == str(noderank)
        assert option(argv, "--master_addr") == "10.0.0.1"
        assert option(argv, "--master_port") == str(PORT)
        assert option(argv, "--nproc_per_node") == "2"
        assert "--standalone" not in argv
        assert argv[-len(script_of(round_)):] == script_of(round_)


def test_python_and_tf_config_run_the_entry_under_the_interpreter_given():
    for name in ("python", "tf_config"):
        round_ = plan_round(name, nproc=1)
        assert argv_of(round_, 2, python="/opt/conda/bin/python") == \
            ["/opt/conda/bin/python", *script_of(round_)]


def test_binary_runs_the_entry_itself_with_no_interpreter():
    round_ = plan_round("binary", nproc=1)
    argv = argv_of(round_, 1, python="/must/not/appear")
    assert argv == script_of(round_)
    assert "/must/not/appear" not in argv


def test_paddle_names_the_master_and_a_fixed_rank_on_many_nodes_only():
    alone = plan_round("paddle", nodes=["node1"], nproc=4)
    argv = argv_of(alone, 0)
    assert argv[:3] == ["py", "-m", "paddle.distributed.launch"]
    assert option(argv, "--nproc_per_node") == "4"
    assert option(argv, "--log_dir") == f"{OUT}/paddle_log"
    assert not {"--master", "--rank", "--nnodes"} & set(argv)
    assert argv[-len(script_of(alone)):] == script_of(alone)

    round_ = plan_round("paddle")
    for noderank in range(3):
        argv = argv_of(round_, noderank)
        assert option(argv, "--nnodes") == "3"
        assert option(argv, "--master") == f"10.0.0.1:{PORT}"
        assert option(argv, "--rank") == str(noderank)
        assert option(argv, "--host") == round_["nodes"][noderank]
        # the launcher's options come before the training script, the case's after it
        assert argv.index("--rank") < argv.index(script_of(round_)[0])


def test_msrun_counts_every_worker_of_the_round_and_this_nodes():
    round_ = plan_round("msrun", nproc=8)
    for noderank in range(3):
        argv = argv_of(round_, noderank)
        assert argv[:3] == ["py", "-m", "mindspore.parallel.cluster.run"]
        assert option(argv, "--worker_num") == "24"
        assert option(argv, "--local_worker_num") == "8"
        assert option(argv, "--master_addr") == "10.0.0.1"
        assert option(argv, "--master_port") == str(PORT)
        assert option(argv, "--node_rank") == str(noderank)
        assert option(argv, "--log_dir") == f"{OUT}/msrun_log"
        assert option(argv, "--join") == "True"
        # msrun runs its workers as `python3 <script> ...`, the interpreter found on PATH
        assert argv[-len(script_of(round_)) - 1:] == ["python3", *script_of(round_)]
    assert argv_of(round_, 0, python="/opt/conda/bin/python")[-len(script_of(round_)) - 1] \
        == "python"


def test_every_python_launcher_runs_a_driver_case_as_the_module_driver_run():
    for name in ("torchrun", "python", "tf_config", "msrun"):
        round_ = driver_round(name, nproc=1)
        argv = argv_of(round_, 1)
        assert argv[-len(script_of(round_)):] == script_of(round_), name
        assert script_of(round_)[:4] == ["-m", "driver.run", "--case", f"{ROOT}/benchmarks/m/fw"]
    # torchrun's own -m (run the script as a module), after its options
    argv = argv_of(driver_round("torchrun", nodes=["node1"], nproc=8), 0)
    assert argv[:7] == ["py", "-m", "torch.distributed.run", "--nproc_per_node", "8",
                        "--standalone", "-m"]
    # msrun's workers: `python3 -m driver.run ...`
    argv = argv_of(driver_round("msrun"), 0)
    assert argv[-len(script_of(driver_round("msrun"))) - 1] == "python3"


def test_paddle_runs_a_driver_case_under_the_interpreter_as_its_training_command():
    # paddle.distributed.launch runs a script ending in .py under its own interpreter and
    # anything else as a command: the module form needs the interpreter in front.
    round_ = driver_round("paddle")
    argv = argv_of(round_, 2, python="/env/bin/python")
    assert argv[-len(script_of(round_)) - 1:] == ["/env/bin/python", *script_of(round_)]
    assert argv.index("--rank") < argv.index("driver.run")


def test_binary_refuses_a_driver_case():
    with pytest.raises(ValueError, match="binary runs an entry file"):
        argv_of(driver_round("binary", nproc=1), 0)


# --- environment -------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_every_launcher_puts_benchmarks_src_and_the_vendor_extern_on_the_path(name):
    """The driver package and the case folders import as packages, the host package's readers
    from src/, a vendor adapter's modules from its extern/; a case's own PYTHONPATH after."""
    env = launch_env(plan_round(name, env={"PYTHONPATH": "/case/lib"}), 0, ROOT, PORT)
    assert env["PYTHONPATH"].split(":") == [
        f"{ROOT}/benchmarks", f"{ROOT}/src", f"{ROOT}/vendors/acme/m-fw/extern", "/case/lib"]

def test_tf_config_lists_every_node_and_this_nodes_index():
    round_ = plan_round("tf_config", nproc=1)
    for noderank in range(3):
        env = launch_env(round_, noderank, ROOT, PORT)
        tf_config = json.loads(env["TF_CONFIG"])
        assert tf_config == {"cluster": {"worker": [f"{a}:{PORT + i}" for i, a in enumerate(NODES)]},
                             "task": {"type": "worker", "index": noderank}}
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(noderank), "3")


def test_every_worker_gets_a_port_of_its_own():
    # TensorFlow listens on 0.0.0.0: workers on one machine collide on a shared port, whatever
    # their addresses (two loopback hosts did).
    assert worker_endpoints(["h1", "h2", "h1", "h1"], 100) == ["h1:100", "h2:101", "h1:102",
                                                               "h1:103"]


def test_one_process_per_node_launchers_give_the_node_its_rank():
    for name in ("python", "binary", "tf_config"):
        round_ = plan_round(name, nproc=1)
        for noderank in range(3):
            env = launch_env(round_, noderank, ROOT, PORT)
            assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                        "MASTER_PORT")} == \
                {"RANK": str(noderank), "LOCAL_RANK": "0", "WORLD_SIZE": "3",
                 "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": str(PORT)}


def test_launchers_that_rank_their_workers_leave_ranks_to_them():
    for name in ("torchrun", "paddle", "msrun"):
        env = launch_env(plan_round(name), 1, ROOT, PORT)
        assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK", "TF_CONFIG"} & set(env), name


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_every_launcher_gives_the_vendor_dir_and_the_case_env_then_the_users(name):
    round_ = plan_round(name, env={"CASE_FLAG": "on", "OMP_NUM_THREADS": 4, "RANK": "99"})
    env = launch_env(round_, 1, ROOT, PORT, {"OMP_NUM_THREADS": "2", "NCCL_DEBUG": "INFO"})
    assert env["FLAGPERF_VENDOR_DIR"] == "/opt/flagperf/vendors/acme"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["CASE_FLAG"] == "on"
    assert env["OMP_NUM_THREADS"] == "2"          # the user's flagperf_env comes last
    assert env["NCCL_DEBUG"] == "INFO"
    # a case's env may not rewire the launcher's ranks
    assert env.get("RANK") == ("1" if name in ("python", "binary", "tf_config") else "99")
    assert all(isinstance(v, str) for v in env.values())


# --- real runs ---------------------------------------------------------------------------

ALL_REDUCE = """\
import argparse, json, os
from pathlib import Path
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
for name in ("--config", "--output_dir", "--data_dir"):
    parser.add_argument(name, required=True)
args = parser.parse_args()
dist.init_process_group("gloo")  # env://: MASTER_ADDR/PORT, RANK, WORLD_SIZE from the launcher
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
Path(args.output_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps({
    "rank": dist.get_rank(), "world": dist.get_world_size(), "sum": value.item(),
    "args": vars(args), "vendor_dir": os.environ["FLAGPERF_VENDOR_DIR"],
    "case_flag": os.environ["CASE_FLAG"]}))
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_nodes(round_: dict, tmp_path: Path, python: str = sys.executable,
              timeout: float = 240) -> list[Path]:
    """Start every node of ``round_`` (checkout at ``tmp_path``) as a round does, each in its
    own output folder and session, and wait for them all; returns the output folders. Fails
    with the nodes' output when one exits non-zero or the timeout passes."""
    port = free_port()
    data = tmp_path / "data set"
    data.mkdir(exist_ok=True)
    nodes = []
    for noderank in range(int(round_["nnodes"])):
        out = tmp_path / f"node{noderank}"
        out.mkdir()
        argv = launch_argv(round_, noderank, python, str(tmp_path), str(out), str(data), port)
        env = {**os.environ, **launch_env(round_, noderank, str(tmp_path), port)}
        log = open(out / "launcher.log", "wb")
        nodes.append((out, log, subprocess.Popen(argv, cwd=out, env=env, stdin=subprocess.DEVNULL,
                                                 stdout=log, stderr=subprocess.STDOUT,
                                                 start_new_session=True)))
    try:
        for out, log, process in nodes:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for out, log, process in nodes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.close()
    logs = "\n".join(f"--- {out.name} (rc {process.returncode})\n"
                     + (out / "launcher.log").read_text(errors="replace")[-3000:]
                     for out, _log, process in nodes)
    assert all(process.returncode == 0 for _out, _log, process in nodes), logs
    return [out for out, _log, _process in nodes]


def write_entry(tmp_path: Path, round_: dict, text: str, mode: int = 0o644) -> None:
    entry = tmp_path / round_["entry"]
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text(text)
    entry.chmod(mode)


@pytest.mark.parametrize("launcher", ["torchrun", "python"])
def test_two_nodes_all_reduce_over_gloo(torchrun, tmp_path, launcher):
    """Two nodes of one process each on 127.0.0.1 meet at noderank 0's port and sum their
    ranks: the argv and environment are enough for torch's env:// rendezvous."""
    need_module("torch", "pip install -e '.[local]'")
    round_ = plan_round(launcher, nodes=["127.0.0.1", "127.0.0.1"], nproc=1,
                        env={"CASE_FLAG": "seen"}, entry="benchmarks/probe/pytorch/probe.py")
    write_entry(tmp_path, round_, ALL_REDUCE)
    outs = run_nodes(round_, tmp_path)
    for noderank, out in enumerate(outs):
        report = json.loads((out / f"rank{noderank}.json").read_text())
        assert (report["rank"], report["world"], report["sum"]) == (noderank, 2, 3.0)
        assert report["args"] == {"config": f"{out}/config.yaml", "output_dir": str(out),
                                  "data_dir": str(tmp_path / "data set")}
        assert report["vendor_dir"] == f"{tmp_path}/vendors/acme"
        assert report["case_flag"] == "seen"


def test_a_binary_entry_runs_itself_with_its_arguments_whole(tmp_path):
    round_ = plan_round("binary", nodes=["127.0.0.1"], nproc=1, env={"CASE_FLAG": "seen"},
                        entry="benchmarks/probe/bin/probe.sh")
    write_entry(tmp_path, round_, '#!/bin/sh\nprintf "%s\\n" "$@" > args.txt\n'
                'echo "$RANK $WORLD_SIZE $FLAGPERF_VENDOR_DIR $CASE_FLAG" > env.txt\n', 0o755)
    [out] = run_nodes(round_, tmp_path, python="/no/interpreter")
    assert (out / "args.txt").read_text().splitlines() == [
        "--config", f"{out}/config.yaml", "--output_dir", str(out), "--data_dir",
        str(tmp_path / "data set")]
    assert (out / "env.txt").read_text().split() == ["0", "1", f"{tmp_path}/vendors/acme", "seen"]


def test_a_python_entry_on_one_node_is_rank_0_of_1(tmp_path):
    round_ = plan_round("python", nodes=["127.0.0.1"], nproc=1, env={"CASE_FLAG": "seen"},
                        entry="benchmarks/probe/plain/probe.py")
    write_entry(tmp_path, round_, "import json, os, sys\n"
                "json.dump({'argv': sys.argv[1:], 'rank': os.environ['RANK'],"
                " 'world': os.environ['WORLD_SIZE'], 'exe': sys.executable},"
                " open('seen.json', 'w'))\n")
    [out] = run_nodes(round_, tmp_path)
    seen = json.loads((out / "seen.json").read_text())
    assert (seen["rank"], seen["world"], seen["exe"]) == ("0", "1", sys.executable)
    assert seen["argv"][:2] == ["--config", f"{out}/config.yaml"]


#: A case's own driver module: ``run(case)`` records what the driver's one entry gave it.
DRIVER_PROBE = """\
import json, os, sys


def run(case):
    rank = os.environ.get("PADDLE_TRAINER_ID") or os.environ["RANK"]
    json.dump({"rank": rank, "ranks": os.environ.get("PADDLE_TRAINERS_NUM"),
               "package": case.package, "name": case.name,
               "framework": case.framework, "description": case.description,
               "argv": sys.argv[1:]}, open("driver{}.json".format(rank), "w"))
    return 0
"""


def write_driver_case(checkout: Path) -> dict:
    """A checkout with the driver package and a case ``probe:pytorch`` whose case.yml names
    its own driver module; returns the case's round fields."""
    shutil.copytree(CHECKOUT / "benchmarks" / "driver", checkout / "benchmarks" / "driver",
                    ignore=shutil.ignore_patterns("__pycache__"))
    case = checkout / "benchmarks" / "probe" / "pytorch"
    case.mkdir(parents=True)
    (case / "case.yml").write_text("description: a probe\ndriver: probe.pytorch.probe\n")
    (case / "probe.py").write_text(DRIVER_PROBE)
    return {"entry": None, "case_dir": "benchmarks/probe/pytorch", "model": "probe",
            "framework": "pytorch"}


def test_a_driver_case_runs_through_the_module_entry_on_every_node(tmp_path, framework_python):
    """Two nodes of one process each start ``python -m driver.run --case`` through paddle's
    launcher (the one that needs the interpreter in front; torchrun's ``-m`` runs every
    training case in tests/test_local_run.py): each rank's run(case) is the case folder's own
    module, imported as a package (no sys.path edit: the launch's PYTHONPATH)."""
    round_ = plan_round("paddle", nodes=["127.0.0.1", "127.0.0.1"], nproc=1,
                        **write_driver_case(tmp_path))
    outs = run_nodes(round_, tmp_path, python=str(framework_python("paddle")))
    for noderank, out in enumerate(outs):
        report = json.loads((out / f"driver{noderank}.json").read_text())
        assert (report["rank"], report["ranks"]) == (str(noderank), "2")
        assert (report["package"], report["name"], report["framework"], report["description"]) \
            == ("probe.pytorch", "probe", "pytorch", "a probe")
        assert report["argv"] == ["--case", f"{tmp_path}/benchmarks/probe/pytorch", "--config",
                                  f"{out}/config.yaml", "--output_dir", str(out), "--data_dir",
                                  str(tmp_path / "data set")]


PADDLE_PROBE = """\
import json, os, sys
json.dump({"trainer": os.environ.get("PADDLE_TRAINER_ID"),
           "trainers": os.environ.get("PADDLE_TRAINERS_NUM"), "argv": sys.argv[1:]},
          open("paddle{}.json".format(os.environ.get("PADDLE_TRAINER_ID")), "w"))
"""


@pytest.mark.parametrize("nnodes", [1])  # 2 nodes: the driver case's test above
def test_paddle_launch_starts_the_entry_on_each_node_with_its_rank(tmp_path, nnodes,
                                                                    framework_python):
    round_ = plan_round("paddle", nodes=["127.0.0.1"] * nnodes, nproc=1,
                        entry="benchmarks/probe/paddle/probe.py")
    write_entry(tmp_path, round_, PADDLE_PROBE)
    outs = run_nodes(round_, tmp_path, python=str(framework_python("paddle")))
    for noderank, out in enumerate(outs):
        report = json.loads((out / f"paddle{noderank}.json").read_text())
        assert (report["trainer"], report["trainers"]) == (str(noderank), str(nnodes))
        assert report["argv"][:2] == ["--config", f"{out}/config.yaml"]
