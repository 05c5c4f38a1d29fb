"""Bad input gets one line naming the file and key, before any host is touched."""

import subprocess
import sys

import pytest
import yaml

from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.run.runner import prepare

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


#: FlagPerf's training catalog in the local inventory's order.
CATALOG = ["resnet50", "mobilenetv2", "efficientnet", "vit", "swin_transformer", "bigtransfer",
           "faster_rcnn", "retinanet", "mask_rcnn", "tacotron2", "waveglow", "wav2vec2", "bert",
           "cpm", "glm", "transformer"]
#: Catalog cases the local run also trains with two processes, right after their 1x1 round.
TWO_PROCESSES = ["resnet50"]


def training_ids() -> list[str]:
    """The local inventory's PyTorch training case ids, in its order."""
    return [case_id for m in CATALOG for case_id in [f"{m}-pytorch-cpux1x1"] + (
        [f"{m}-pytorch-cpux1x2"] if m in TWO_PROCESSES else [])]


#: The LLM cases on megatron-core after the catalog, (model, processes): 1x1, then 1x2 (gpt
#: pipeline parallel, llama3_8b tensor parallel).
LLM = [("gpt", 1), ("gpt", 2), ("llama3_8b", 1), ("llama3_8b", 2)]
#: The catalog's cases on other frameworks, (model, framework), after the LLM cases.
FRAMEWORKS = [("resnet50", "tensorflow2"), ("resnet50", "mindspore"), ("bert", "paddle")]
#: FlagPerf's inference cases, on the cpu vendor's onnxruntime (after the training catalog).
INFERENCE = ["resnet50", "vit_l_16", "swin_transformer", "bert_large"]


#: The local inventory's base cases and their processes per node.
BASE = {"computation": 1, "main_memory-bandwidth": 1, "main_memory-capacity": 1,
        "interconnect-h2d": 1, "interconnect-d2h": 1, "interconnect-P2P_intraserver": 2,
        "interconnect-all_reduce": 2}


def test_local_inventory_plans_a_round_of_each_base_and_training_case(project):
    plan = prepare(project, str(project / "inventories/local")).plan
    assert [r["key"] for r in plan["rounds"]] == [
        f"{m}-pytorch-base-cpux1x{n}/round1" for m, n in BASE.items()] + [
        f"{case_id}/round1" for case_id in training_ids()] + [
        f"{m}-megatron-cpux1x{n}/round1" for m, n in LLM] + [
        f"{m}-{f}-cpux1x1/round1" for m, f in FRAMEWORKS] + [
        f"{m}-pytorch-inference-cpux1x1/round1" for m in INFERENCE]
    assert all(r["profile"]["name"] == "cpu" for r in plan["rounds"])
    # The cpu vendor's own inference configuration: its compiler, changed from FlagPerf's.
    inference = plan["rounds"][-1]
    assert inference["config"]["compiler"] == "onnxruntime"
    assert inference["vendor_config"]["changed"]["compiler"] == {"default": "tensorrt",
                                                                  "value": "onnxruntime"}
    # Every compared base figure is planned without a ratio: the cpu vendor states no datasheet.
    compared = plan["rounds"][0]["datasheet_basis"]
    assert compared["tflops_fp32"]["reason"] == "vendors/cpu/vendor.yml states no peak_flops.fp32 for cpu"
    first = plan["rounds"][len(BASE)]
    assert first["config"]["target_acc1"] == 90.0          # the cpu profile
    assert first["config"]["momentum"] == 0.9              # from the standard configuration
    assert first["overrides"] == {}
    assert first["launcher"] == "torchrun" and first["hosts"] == ["localhost"]
    # Runtime none: every framework but the host's own PyTorch runs in its environment.
    assert sorted(plan["envs"]) == sorted({f for _, f in FRAMEWORKS})
    assert {r["framework"]: r["launcher"] for r in plan["rounds"] if r["framework"] != "pytorch"} \
        == {"megatron": "torchrun", "tensorflow2": "tf_config", "mindspore": "msrun",
            "paddle": "paddle"}
    # The cpu vendor's 1x2 layouts of the LLM cases, over their cpu profiles.
    layouts = {r["case_id"]: (r["config"]["tensor_model_parallel_size"],
                              r["config"]["pipeline_model_parallel_size"])
               for r in plan["rounds"] if r["framework"] == "megatron"}
    assert layouts == {"gpt-megatron-cpux1x1": (1, 1), "gpt-megatron-cpux1x2": (1, 2),
                       "llama3_8b-megatron-cpux1x1": (1, 1), "llama3_8b-megatron-cpux1x2": (2, 1)}


# Malformed settings, inventories and case specs: tests/test_bad_input.py (through the CLI).


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


def test_validate_command_accepts_the_local_inventory(project):
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "validate", "-i",
                           "inventories/local"], capture_output=True, text=True, cwd=project)
    assert done.returncode == 0, done.stderr
    rounds = len(BASE) + len(training_ids()) + len(LLM) + len(FRAMEWORKS) + len(INFERENCE)
    assert (f"{rounds} round(s) on 1 host(s): computation-pytorch-base-cpux1x1, "
            "main_memory-bandwidth-pytorch-base-cpux1x1") in done.stdout
    assert "resnet50-pytorch-cpux1x1, resnet50-pytorch-cpux1x2, mobilenetv2" in done.stdout


def test_validate_takes_one_case_with_its_data_from_the_command_line(project):
    """``--case SPEC=DATA_DIR`` in the suite form that ``cases`` lists: the data folder is the
    one checked (a local host's, in its case's format), and a wrong one is named as given."""
    def validate(*spec: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "flagperf_ansible", "validate", "-i",
                               "inventories/local", *[a for s in spec for a in ("--case", s)]],
                              capture_output=True, text=True, cwd=project)

    done = validate("resnet50:pytorch:inference:cpu:1:1:2=data/digits",
                    "computation:pytorch:base:cpu:1:1:1")
    assert done.returncode == 0, done.stderr
    assert ("3 round(s) on 1 host(s): resnet50-pytorch-inference-cpux1x1, "
            "computation-pytorch-base-cpux1x1") in done.stdout
    done = validate("resnet50:pytorch:cpu:1:1:1=data/coco2017")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("flagperf-ansible: command line: flagperf_cases[0].data_dir: "
                           "data_dir ") and "data/coco2017 is not imagenet data" in line, line


def test_docker_runtime_plans_the_vendor_image(scratch_project):
    plan = plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE],
                                      "flagperf_container_runtime": "docker"})
    image = plan["images"]["pytorch"]
    assert image["name"] == "flagperf-cpu-pytorch" and len(image["tag"]) == 16
    assert plan["container"]["privileged"] is False
