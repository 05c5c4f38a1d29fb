"""Backend slurm's command lines, without a cluster: a round's ``sbatch`` line and its checks,
the settings' checks, the plan's node tokens, and a node's container command line for each
runtime (``docker run``, which runs here on the Slurm cluster's tests; pyxis's ``srun
--container-image`` and ``apptainer exec``, which cannot run here: their lines are checked
against the tools' documented options)."""

from __future__ import annotations

import pytest
import yaml

from flagperf_ansible.config import containers, slurm
from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.config.settings import check_settings
from flagperf_ansible.run.plan import build_plan
from flagperf_host import slurm_node

SLURM = {"partition": "gpu", "account": "bench", "qos": "high", "reservation": "mlperf",
         "exclusive": True, "options": ["--constraint=a100", "--gres=gpu:8"], "time_limit": ""}


def test_a_rounds_sbatch_line_carries_every_setting():
    argv = slurm.sbatch_argv(SLURM, "flagperf-run1-r1", 2, "25", "/w/slurm-%j.out")
    assert argv == ["sbatch", "--parsable", "--job-name=flagperf-run1-r1", "--nodes=2",
                    "--ntasks-per-node=1", "--no-requeue", "--time=25",
                    "--output=/w/slurm-%j.out", "--partition=gpu", "--account=bench",
                    "--qos=high", "--reservation=mlperf", "--exclusive", "--constraint=a100",
                    "--gres=gpu:8"]
    bare = slurm.sbatch_argv({"partition": "", "exclusive": False, "options": []}, "j", 1, "5",
                             "o")
    assert not any(a.startswith(("--partition", "--account", "--qos", "--reservation",
                                 "--exclusive")) for a in bare)


def test_the_time_limit_is_the_timeout_and_a_margin_in_whole_minutes_unless_set():
    assert slurm.time_limit("", 900) == "25"          # (900 + 600) / 60
    assert slurm.time_limit("", 901) == "26"          # rounded up
    assert slurm.time_limit("1-00:00:00", 900) == "1-00:00:00"


@pytest.mark.parametrize("value", ["30", "30:00", "2:30:00", "1-12", "1-12:30", "1-12:30:00",
                                   "UNLIMITED", ""])
def test_slurm_time_forms_are_accepted(value):
    assert slurm.check_time_limit(value) == value


@pytest.mark.parametrize("value", ["30m", "1 day", "-5", "2:30:00:00", "1-"])
def test_other_time_limits_are_refused(value):
    with pytest.raises(ValueError, match="not a Slurm time limit"):
        slurm.check_time_limit(value)


@pytest.mark.parametrize("option,why", [
    ("-C a100", "one long sbatch option"), ("--constraint a100", "one long sbatch option"),
    ("--comment=$(id)", "one long sbatch option"), ("--nodes=4", "set by the round itself"),
    ("--time=10", "set by the round itself"), ("--export=NONE", "set by the round itself"),
    ("--wrap=id", "set by the round itself")])
def test_sbatch_options_are_one_word_and_never_the_rounds_own(option, why):
    with pytest.raises(ValueError, match=why):
        slurm.check_options([option])


def settings(**extra):
    from flagperf_ansible.config.settings import defaults

    return {**defaults(), "flagperf_cases": ["interconnect-all_reduce:pytorch:base:cpu:2:1:1"],
            **extra}


@pytest.mark.parametrize("key,value,words", [
    ("flagperf_backend", "pbs", "Input should be 'ssh' or 'slurm'"),
    ("flagperf_slurm_partition", "gpu;id", "not a safe name"),
    ("flagperf_slurm_time_limit", "soon", "not a Slurm time limit"),
    ("flagperf_slurm_options", ["--chdir=/tmp"], "set by the round itself"),
    ("flagperf_container_images", {"pytorch": "x.sif; id"}, "not an image file or URI"),
])
def test_bad_slurm_settings_name_their_key(key, value, words):
    with pytest.raises(ConfigError) as caught:
        check_settings(settings(**{key: value}), {key: "inv/group_vars/all.yml"})
    assert str(caught.value).startswith(f"inv/group_vars/all.yml: {key}")
    assert words in str(caught.value)


def test_the_plan_of_a_slurm_round_holds_tokens_for_the_jobs_nodes(project):
    plan = build_plan(settings(flagperf_backend="slurm", flagperf_slurm_partition="bench"), {},
                      ["login1"], {"login1": "10.0.0.5"}, project)
    (round_,) = plan["rounds"]
    assert round_["hosts"] == ["login1"]                 # the submit host
    assert round_["master_addr"] == slurm_node.ADDR_TOKEN.format(0)
    assert round_["nodes"] == [slurm_node.ADDR_TOKEN.format(i) for i in range(2)]
    assert round_["node_names"] == [slurm_node.HOST_TOKEN.format(i) for i in range(2)]
    assert plan["backend"] == "slurm" and plan["slurm"]["partition"] == "bench"
    # nnodes is the partition's to hold, not the inventory's (the preflight asks sinfo).
    assert round_["nnodes"] == 2


@pytest.mark.parametrize("extra,words", [
    ({"flagperf_backend": "slurm"}, "must hold that one host"),
    ({"flagperf_container_runtime": "apptainer"}, "needs flagperf_backend: slurm"),
])
def test_the_slurm_backend_needs_one_submit_host_and_runtimes_their_backend(project, extra, words):
    with pytest.raises(ConfigError, match=words):
        build_plan(settings(**extra), {}, ["a", "b"], {}, project)


def test_pyxis_and_apptainer_need_each_frameworks_image(project):
    with pytest.raises(ConfigError, match="needs the image of framework pytorch"):
        build_plan(settings(flagperf_backend="slurm", flagperf_container_runtime="pyxis"), {},
                   ["login1"], {}, project)
    plan = build_plan(settings(flagperf_backend="slurm", flagperf_container_runtime="pyxis",
                               flagperf_container_images={"pytorch": "docker://nvcr.io#nvidia/pytorch:25.01-py3"}),
                      {}, ["login1"], {}, project)
    assert plan["images"]["pytorch"]["name"] == "docker://nvcr.io#nvidia/pytorch:25.01-py3"


ARGV = ["python3", "-m", "torch.distributed.run", "--master_addr", "@FLAGPERF_ADDR_0@"]
OPTIONS = yaml.safe_load("""
privileged: false
device_requests: [{driver: nvidia, count: -1, capabilities: [[gpu]]}]
shm_size: 32g
ipc_mode: host
network_mode: host
""")


def line(runtime, options=OPTIONS, data="/data/imagenet"):
    return containers.container_argv(runtime, "img:1", "flagperf-run1-c-r1-n0", "@FLAGPERF_JOB_ID@",
                                     "@FLAGPERF_HOST_0@", "/shared/flagperf", "/shared/work/n0",
                                     data, ["MASTER_ADDR", "RANK"], options, "1000:1000", ARGV)


def test_docker_run_has_init_the_jobs_label_and_the_environment_by_name():
    argv = line("docker")
    assert argv[:8] == ["docker", "run", "--init", "--name", "flagperf-run1-c-r1-n0", "--label",
                        "flagperf.slurm_job=@FLAGPERF_JOB_ID@", "--workdir"]
    assert "--rm" not in argv                    # the end step keeps its log, then removes it
    pairs = list(zip(argv, argv[1:]))
    for pair in [("--user", "1000:1000"), ("--network", "host"), ("--ipc", "host"),
                 ("--shm-size", "32g"), ("--gpus", "all"), ("--env", "MASTER_ADDR"),
                 ("--env", "RANK"), ("--volume", "/shared/flagperf:/workspace/flagperf:ro"),
                 ("--volume", "/shared/work/n0:/workspace/output:rw"),
                 ("--volume", "/data/imagenet:/workspace/data:ro")]:
        assert pair in pairs, pair
    assert "--privileged" not in argv
    assert argv[argv.index("img:1"):] == ["img:1", *ARGV]
    assert "--privileged" in line("docker", {"privileged": True})
    counted = line("docker", {"device_requests": [{"count": 2}]})
    assert counted[counted.index("--gpus") + 1] == "2"
    assert not any(a.endswith(":/workspace/data:ro") for a in line("docker", data=""))


def test_pyxis_runs_a_step_of_its_own_on_this_node_in_the_image():
    """pyxis's options as its README documents them (--container-image, --container-mounts
    SRC:DST[:FLAGS] comma-separated, --container-workdir, --no-container-mount-home), in a step
    that shares the node with the job's running one (srun --overlap, Slurm 20.11+)."""
    assert line("pyxis") == [
        "srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=@FLAGPERF_HOST_0@",
        "--container-image=img:1",
        "--container-mounts=/shared/flagperf:/workspace/flagperf:ro,/shared/work/n0:/workspace/output,"
        "/data/imagenet:/workspace/data:ro",
        "--container-workdir=/workspace/output", "--no-container-mount-home", *ARGV]


def test_apptainer_exec_binds_the_folders_and_passes_nvidias_devices_when_requested():
    """apptainer exec's options as its user guide documents them (--bind SRC:DST[:ro] comma-
    separated, --pwd, --no-home, --nv)."""
    assert line("apptainer") == [
        "apptainer", "exec", "--no-home", "--bind",
        "/shared/flagperf:/workspace/flagperf:ro,/shared/work/n0:/workspace/output,"
        "/data/imagenet:/workspace/data:ro", "--pwd", "/workspace/output", "--nv", "img:1", *ARGV]
    assert "--nv" not in line("apptainer", {})


def test_an_unknown_runtime_is_refused():
    with pytest.raises(ValueError, match="unknown container runtime"):
        line("podman")


def test_a_node_replaces_the_tokens_of_its_job():
    tokens = {slurm_node.HOST_TOKEN.format(0): "gpu17", slurm_node.ADDR_TOKEN.format(0): "10.0.0.17",
              slurm_node.JOB_TOKEN: "4242"}
    step = {"argv": ["--master_addr", "@FLAGPERF_ADDR_0@", "--label",
                     "flagperf.slurm_job=@FLAGPERF_JOB_ID@"],
            "environment": {"TF_CONFIG": '{"worker": ["@FLAGPERF_ADDR_0@:2950"]}'},
            "dir": "@FLAGPERF_HOST_0@_noderank0", "timeout": 60}
    assert slurm_node.substitute(step, tokens) == {
        "argv": ["--master_addr", "10.0.0.17", "--label", "flagperf.slurm_job=4242"],
        "environment": {"TF_CONFIG": '{"worker": ["10.0.0.17:2950"]}'},
        "dir": "gpu17_noderank0", "timeout": 60}
