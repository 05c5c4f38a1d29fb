"""Bad input gets one line naming the file and key, before any host is touched."""

import subprocess
import sys

import pytest
import yaml

from flagperf_ansible.errors import ConfigError
from flagperf_ansible.runner import prepare

GOOD_CASE = {"model": "resnet50", "framework": "pytorch", "hardware": "cpu", "nnodes": 1,
             "nproc_per_node": 1, "repeat": 2, "data_dir": "data/digits"}


def write_inventory(root, settings, hosts=("localhost",)):
    inventory = root / "inv"
    (inventory / "group_vars").mkdir(parents=True, exist_ok=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"flagperf_hosts": {"hosts": {h: {} for h in hosts}}}}}))
    (inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump(settings))
    return inventory


def plan_for(project, settings, hosts=("localhost",)):
    inventory = write_inventory(project, settings, hosts)
    return prepare(project, str(inventory)).plan


def test_local_inventory_plans_two_resnet50_rounds(project):
    plan = prepare(project, str(project / "inventories/local")).plan
    assert [r["key"] for r in plan["rounds"]] == [
        "resnet50-pytorch-cpux1x1/round1", "resnet50-pytorch-cpux1x1/round2"]
    first = plan["rounds"][0]
    assert first["config"]["target_acc1"] == 90.0          # the cpu profile
    assert first["config"]["momentum"] == 0.9              # from the standard configuration
    assert first["overrides"] == {}
    assert first["launcher"] == "torchrun" and first["hosts"] == ["localhost"]


@pytest.mark.parametrize("settings, where, fragment", [
    ({"flagperf_vendr": "cpu"}, "all.yml: flagperf_vendr", "unknown setting"),
    ({"flagperf_vendor": "acme"}, "all.yml: flagperf_vendor", "no vendor 'acme'"),
    ({"flagperf_vendor": "../cpu"}, "all.yml: flagperf_vendor", "not a safe name"),
    ({"flagperf_container_runtime": "podman"}, "all.yml: flagperf_container_runtime", "'none'"),
    ({"flagperf_master_port": 80}, "all.yml: flagperf_master_port", "greater than or equal to 1024"),
    ({"flagperf_master_port": "high"}, "all.yml: flagperf_master_port", "valid integer"),
    ({"flagperf_clear_caches": "sometimes"}, "all.yml: flagperf_clear_caches", "valid boolean"),
    ({"flagperf_monitor_interval": 0}, "all.yml: flagperf_monitor_interval", "greater than 0"),
    ({"flagperf_workdir": "tmp/flagperf"}, "all.yml: flagperf_workdir", "absolute path"),
    ({"flagperf_workdir": "/tmp/a b"}, "all.yml: flagperf_workdir", "not a safe path"),
    ({"flagperf_python": "python3; id"}, "all.yml: flagperf_python", "not a safe path"),
    ({"flagperf_run_id": "yesterday"}, "all.yml: flagperf_run_id", "not a run id"),
    ({"flagperf_cases": []}, "all.yml: flagperf_cases", "at least 1 item"),
    ({"flagperf_cases": "resnet50:pytorch:cpu:1:1:1"}, "all.yml: flagperf_cases", "valid list"),
    ({"flagperf_cases": ["bert:pytorch:cpu:1:1:1"]}, "all.yml: flagperf_cases[0]",
     "no standard case bert:pytorch"),
    ({"flagperf_cases": ["resnet50:pytorch:cpu:2:1:1"]}, "all.yml: flagperf_cases[0].nnodes",
     "more than the 1 host(s)"),
    ({"flagperf_cases": ["resnet50:pytorch:cpu:1:1:1"]}, "all.yml: flagperf_cases[0].data_dir",
     "needs data_dir"),
    ({"flagperf_cases": [GOOD_CASE, GOOD_CASE]}, "all.yml: flagperf_cases[1]", "listed twice"),
    ({"flagperf_cases": [{**GOOD_CASE, "timeout": -5}]}, "all.yml: flagperf_cases[0].timeout",
     "greater than or equal to 0"),
    ({"flagperf_env": {"NCCL DEBUG": 1}}, "all.yml: flagperf_env", "not an environment variable"),
    ({"flagperf_base_image": "Debian 12"}, "all.yml: flagperf_base_image", "not an image reference"),
    ({"flagperf_image_wheels": ["/opt/w/x.whl;id"]}, "all.yml: flagperf_image_wheels",
     "not a safe path"),
    ({"flagperf_cases": [{**GOOD_CASE, "nproc_per_node": 0}]},
     "all.yml: flagperf_cases[0].nproc_per_node", "greater than 0"),
])
def test_bad_settings(scratch_project, settings, where, fragment):
    base = {"flagperf_cases": [GOOD_CASE]}
    with pytest.raises(ConfigError) as caught:
        plan_for(scratch_project, {**base, **settings})
    message = str(caught.value)
    assert where in message and fragment in message, message
    assert "\n" not in message


def test_missing_group_and_empty_group(scratch_project):
    inventory = scratch_project / "bad"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n    a:\n")
    with pytest.raises(ConfigError, match="hosts.yml: no group 'flagperf_hosts'"):
        prepare(scratch_project, str(inventory))
    (inventory / "hosts.yml").write_text("all:\n  children:\n    flagperf_hosts:\n")
    with pytest.raises(ConfigError, match="hosts.yml: flagperf_hosts: the group has no hosts"):
        prepare(scratch_project, str(inventory))


def test_yaml_syntax_error_names_file_and_line(scratch_project):
    inventory = write_inventory(scratch_project, {})
    (inventory / "group_vars" / "all.yml").write_text("flagperf_cases: [a, b\nflagperf_vendor: cpu\n")
    with pytest.raises(ConfigError, match=r"all.yml: line \d+: "):
        prepare(scratch_project, str(inventory))


def vendor_override(project, text):
    path = project / "vendors/cpu/resnet50-pytorch/config/cpux1x1.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_vendor_override_of_a_mutable_key_is_applied_and_recorded(scratch_project):
    vendor_override(scratch_project, "train_batch_size: 16\n")
    rounds = plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE]})["rounds"]
    assert rounds[0]["config"]["train_batch_size"] == 16
    assert rounds[0]["overrides"] == {"train_batch_size": 16}


@pytest.mark.parametrize("text, key, fragment", [
    ("momentum: 0.5\n", "momentum", "not a mutable key"),
    ("batch_size: 8\n", "batch_size", "unknown key"),
    ("train_batch_size: 32\n", "train_batch_size", "override equals the standard value 32"),
])
def test_vendor_override_rules(scratch_project, text, key, fragment):
    vendor_override(scratch_project, text)
    with pytest.raises(ConfigError) as caught:
        plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE]})
    assert f"vendors/cpu/resnet50-pytorch/config/cpux1x1.yaml: {key}: {fragment}" in str(caught.value)


def test_validate_command_prints_one_line_and_exits_2(tmp_path, project):
    inventory = write_inventory(tmp_path, {"flagperf_cases": [{**GOOD_CASE, "nnodes": 0}]})
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "validate", "-i", str(inventory)],
                          capture_output=True, text=True, cwd=project)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "group_vars/all.yml: flagperf_cases[0].nnodes: Input should be greater than 0" in lines[0]


def test_validate_command_accepts_the_local_inventory(project):
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "validate", "-i",
                           "inventories/local"], capture_output=True, text=True, cwd=project)
    assert done.returncode == 0, done.stderr
    assert "2 round(s): resnet50-pytorch-cpux1x1" in done.stdout


def test_docker_runtime_needs_the_vendor_image_definition(scratch_project):
    import shutil

    plan = plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE],
                                      "flagperf_container_runtime": "docker"})
    image = plan["images"]["pytorch"]
    assert image["name"] == "flagperf-cpu-pytorch" and len(image["tag"]) == 16
    assert plan["container"]["privileged"] is False

    shutil.rmtree(scratch_project / "vendors/cpu/docker_image")
    with pytest.raises(ConfigError, match=r"all.yml: flagperf_cases\[0\]: vendor cpu has no image "
                                          r"for framework pytorch"):
        plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE],
                                   "flagperf_container_runtime": "docker"})
