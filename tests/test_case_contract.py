"""The case contract: case.yml and config files are schemas, suites sit side by side, profiles
are labelled, and validation walks the whole vendor kit."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import host_side
from flagperf_ansible.config.cases import NOT_PROFILES, active_targets, check_vendor_kit, \
    list_cases, load_case, profile_of
from flagperf_ansible.config.errors import ConfigError
from test_validation import GOOD_CASE, plan_for

ROOT = Path(__file__).resolve().parents[1]
CASE = "benchmarks/resnet50/pytorch/case.yml"
STANDARD = "benchmarks/resnet50/pytorch/config/standard.yaml"
PROFILE = "benchmarks/resnet50/pytorch/config/cpu.yaml"


def edit(project: Path, relative: str, old: str, new: str) -> None:
    path = project / relative
    text = path.read_text()
    assert old in text, f"{relative} has no {old!r}"
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("relative, old, new, where", [
    (CASE, "precision_peak:", "precison_peak:", f"{CASE}: precison_peak"),
    (CASE, "suite: training", "suite: trainig", f"{CASE}: suite"),
    (CASE, "launcher: torchrun", "launcher: mpirun", f"{CASE}: launcher"),
    (CASE, "comparison: \">=\"", "comparison: \"<=\"", f"{CASE}: target.comparison"),
    (CASE, "metric: final_acc1", "metric: final_acc5", f"{CASE}: target.metric"),
    (CASE, "config_key: target_acc1", "config_key: target_top1", f"{CASE}: target.config_key"),
    (CASE, "unit: images", "unit: pictures", f"{CASE}: throughput.unit"),
    (CASE, "format: imagenet", "format: imagenett", f"{CASE}: data.format"),
    (CASE, "driver: driver.torch.classification", "driver: driver.torch.clasification",
     f"{CASE}: driver"),
    (CASE, "driver: driver.torch.classification", "driver: classification",
     f"{CASE}: driver"),
    (CASE, "driver: driver.torch.classification", "entry: run.py",
     f"{CASE}: model is built by a driver"),
    ("benchmarks/sleep/pytorch/case.yml", "entry: run_sleep.py", "entry: run.py",
     "benchmarks/sleep/pytorch/case.yml: entry: no file run.py"),
    (CASE, "driver: driver.torch.classification", "driver: driver.torch.classification\n"
     "entry: run_pretraining.py", f"{CASE}: give driver"),
    (CASE, "{zero_init_residual: zero_init_residual}", "{zero_init_residual: zero_init}",
     f"{CASE}: model.arguments"),
    (CASE, "builder: torchvision.models.resnet50", "builder: resnet50",
     f"{CASE}: model.builder"),
    ("benchmarks/bert/pytorch/case.yml", "builder: bert.pytorch.model.build_model",
     "builder: bert.pytorch.modle.build_model",
     "benchmarks/bert/pytorch/case.yml: model.builder: no module bert.pytorch.modle"),
    (CASE, "timeout: 86400", "timeout: true", f"{CASE}: timeout"),
    (STANDARD, "  - precision\n", "  - precison\n", f"{STANDARD}: mutable"),
    (STANDARD, "  - momentum\n", "  - learning_rate\n", f"{STANDARD}: fixed"),
    (PROFILE, "  seed: 1234\n", "  sed: 1234\n", f"{PROFILE}: params.sed"),
    (PROFILE, "  reduced: [image size", "  reduced: [image sizes", f"{PROFILE}: profile.reduced"),
])
def test_a_bad_case_file_is_one_line_naming_file_and_key(scratch_project, relative, old, new,
                                                         where):
    edit(scratch_project, relative, old, new)
    with pytest.raises(ConfigError) as caught:
        plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE]})
    message = str(caught.value)
    assert message.startswith(where), message
    assert "\n" not in message


def test_a_one_process_launcher_refuses_more_processes_per_node(scratch_project):
    sleep = {"model": "sleep", "framework": "pytorch", "hardware": "cpu", "nnodes": 1,
             "nproc_per_node": 2}
    with pytest.raises(ConfigError, match=r"flagperf_cases\[0\].nproc_per_node: the case's "
                                          "launcher python starts one process per node"):
        plan_for(scratch_project, {"flagperf_cases": [sleep]})


def test_baselines_are_a_training_profiles(scratch_project):
    """A base case's profile with baselines: one line naming the file and key."""
    path = scratch_project / "benchmarks/base/computation/pytorch/config/cpu.yaml"
    text = path.read_text()
    path.write_text(text.replace("  reduced:", "  baselines: {spread: 1.0, basis: measured}\n"
                                 "  scaling: {rule: per_topology, topologies: {'1x1': {}}, "
                                 "why: measured}\n  reduced:", 1))
    with pytest.raises(ConfigError, match="computation/pytorch/config/cpu.yaml: "
                                          "profile.baselines: baselines are a training "):
        plan_for(scratch_project, {"flagperf_cases": [
            {"model": "computation", "framework": "pytorch", "suite": "base", "hardware": "cpu",
             "nnodes": 1, "nproc_per_node": 1, "repeat": 1}]})


def test_a_profile_may_not_change_a_fixed_key(scratch_project):
    edit(scratch_project, PROFILE, "  seed: 1234\n", "  seed: 1234\n  momentum: 0.5\n")
    with pytest.raises(ConfigError, match=f"{PROFILE}: params.momentum: a fixed key"):
        plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE]})


def test_a_profile_round_is_labelled_and_the_standard_one_is_not(scratch_project):
    profile = plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE]})["rounds"][0]
    assert profile["profile"] == {
        "name": "cpu", "standard": False,
        "reduced": ["image size", "data set", "epochs", "augmentation"],
        "description": profile["profile"]["description"], "checkpoint": None,
        "baselines": {"spread": 1.6, "basis": profile["profile"]["baselines"]["basis"],
                      "target": None},
        "scaling": profile["profile"]["scaling"]}
    assert profile["profile"]["scaling"]["rule"] == "per_topology"
    # Its baselines: the driver scores the untrained model and the input-blind predictor.
    assert profile["config"]["evaluate_baselines"] is True
    assert profile["suite"] == "training" and profile["data_format"] == "imagenet"
    assert profile["contract"]["target"] == {"metric": "final_acc1", "comparison": ">=",
                                             "config_key": "target_acc1"}
    standard = plan_for(scratch_project, {
        "flagperf_vendor": "nvidia",
        "flagperf_cases": [{**GOOD_CASE, "hardware": "A100", "nproc_per_node": 8}]})["rounds"][0]
    assert standard["profile"] is None and standard["config"]["train_crop_size"] == 224
    assert "evaluate_baselines" not in standard["config"]


def test_every_case_and_every_vendor_override_in_the_tree_validates(project):
    """The catalog as it stands: each case of each suite loads, and each vendor's override
    files agree with their cases (the kit check validate runs for the vendor in use)."""
    cases = list_cases(project)
    assert {c.suite for c in cases} >= {"training", "diagnostic"}
    overrides = sorted(project.glob("vendors/*/**/config/*.yaml"))
    assert overrides, "no vendor override in the tree"
    checked = {v.parent.name: check_vendor_kit(project, v.parent.name)
               for v in sorted(project.glob("vendors/*/vendor.yml"))}
    per_case = sum(2 + len([p for p in (c.directory / "config").glob("*.yaml")
                            if p.stem not in NOT_PROFILES]) for c in cases)
    vendor_configs = sorted(project.glob("vendors/*/inference/*/vendor_config/*.yaml"))
    assert sum(checked.values()) == per_case * len(checked) + len(overrides) + len(vendor_configs)


def test_validate_checks_an_override_the_plan_does_not_run(scratch_project):
    """A broken vendor file for a configuration nobody asked for still fails validation."""
    path = scratch_project / "vendors/cpu/resnet50-pytorch/config/cpux8x1.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("momentum: 0.5\n")
    with pytest.raises(ConfigError, match="cpux8x1.yaml: momentum: not a mutable key"):
        plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE]})
    path.unlink()
    stray = scratch_project / "vendors/cpu/resnet5O-pytorch/config/cpux1x1.yaml"
    stray.parent.mkdir(parents=True)
    stray.write_text("seed: 1\n")
    with pytest.raises(ConfigError, match="resnet5O-pytorch/config/cpux1x1.yaml: no case"):
        plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE]})


def add_inference_twin(project: Path) -> Path:
    """The inference case of resnet50:pytorch, beside the training one."""
    folder = project / "benchmarks/inference/resnet50/pytorch"
    assert (folder / "case.yml").is_file()
    return folder


def test_training_and_inference_cases_of_one_model_sit_side_by_side(scratch_project):
    add_inference_twin(scratch_project)
    keys = {(c.key, c.suite) for c in list_cases(scratch_project)}
    assert {("resnet50:pytorch", "training"),
            ("resnet50:pytorch:inference", "inference")} <= keys
    twin = {**GOOD_CASE, "suite": "inference", "repeat": 1}
    plan = plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE, twin]})
    assert [c["case_id"] for c in plan["cases"]] == [
        "resnet50-pytorch-cpux1x1", "resnet50-pytorch-inference-cpux1x1"]
    inference = plan["rounds"][-1]
    # A driver runs it: no entry file, its folder for ``python -m driver.run --case``.
    assert inference["entry"] is None
    assert inference["case_dir"] == "benchmarks/inference/resnet50/pytorch"
    assert inference["contract"]["window"] == ["INFERENCE_START", "INFERENCE_END"]
    assert inference["mfu_basis"]["throughput"] == "p_inference_core"
    # FlagPerf's six-field key keeps meaning training.
    plan = plan_for(scratch_project, {"flagperf_cases": [{"resnet50:pytorch:cpu:1:1:1": "d"}]})
    assert plan["rounds"][0]["suite"] == "training"


def test_an_inference_case_in_the_training_tree_is_refused(scratch_project):
    folder = add_inference_twin(scratch_project)
    target = scratch_project / "benchmarks/resnet18/pytorch"
    target.parent.mkdir()
    folder.rename(target)
    with pytest.raises(ConfigError, match="resnet18/pytorch/case.yml: suite: a inference case "
                                          "does not belong under benchmarks/"):
        load_case(scratch_project, "resnet18", "pytorch")


def test_cases_command_lists_every_case_with_its_suite(scratch_project):
    add_inference_twin(scratch_project)
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "cases"],
                          capture_output=True, text=True, timeout=60,
                          env={"FLAGPERF_PROJECT_DIR": str(scratch_project),
                               "PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    lines = [line.split()[:2] for line in done.stdout.splitlines()]
    assert ["inference", "resnet50:pytorch:inference"] in lines
    assert ["training", "resnet50:pytorch"] in lines
    assert ["diagnostic", "sleep:pytorch"] in lines
    # The last line says how to run one, with an example the parser takes.
    example = done.stdout.splitlines()[-1].split("--case ")[-1]
    from flagperf_ansible.config.casespec import parse_case_spec
    assert parse_case_spec(example).case_id == "resnet50-pytorch-inference-cpux1x1"


def test_validate_checks_the_data_folder_on_a_local_inventory(scratch_project, tmp_path):
    inventory = scratch_project / "inv"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"flagperf_hosts": {
        "hosts": {"localhost": {"ansible_connection": "local"}}}}}}))
    data = tmp_path / "images"
    (data / "train/cat").mkdir(parents=True)
    (inventory / "group_vars/all.yml").write_text(yaml.safe_dump({
        "flagperf_cases": [{**GOOD_CASE, "data_dir": str(data)}]}))
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "validate", "-i", str(inventory)],
                          capture_output=True, text=True, timeout=60,
                          env={"FLAGPERF_PROJECT_DIR": str(scratch_project),
                               "PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, done.stdout + done.stderr
    line, = done.stderr.splitlines()
    assert line.startswith(f"flagperf-ansible: {inventory}/group_vars/all.yml: "
                           f"flagperf_cases[0].data_dir: data_dir {data} is not imagenet data: "
                           "train/: 1 class folder(s) without images: cat (and 1 more); "), line
    assert "flagperf-ansible data check imagenet" in line


def test_preflight_check_verifies_a_declared_checkpoint(digits_dir, tmp_path):
    """flagperf_host.data_check as preflight runs it (from the host archive): the data layout,
    then the checkpoint's SHA-256."""
    import hashlib
    import json
    import shutil

    data = tmp_path / "data"
    shutil.copytree(digits_dir, data)
    (data / "init.pt").write_bytes(b"weights")
    good = hashlib.sha256(b"weights").hexdigest()

    def check(sha256: str) -> tuple[int, list[str]]:
        request = [{"format": "imagenet", "path": str(data), "case_id": "c",
                    "checkpoint": {"path": "init.pt", "sha256": sha256}}]
        done = subprocess.run(host_side.command("data_check", json.dumps(request)),
                              env=host_side.env(), capture_output=True, text=True, timeout=60,
                              cwd="/")
        return done.returncode, json.loads(done.stdout)["results"][0]["problems"]

    assert check(good) == (0, [])
    rc, problems = check("0" * 64)
    assert rc == 1 and problems == [f"init.pt: SHA-256 {good}, the case expects {'0' * 64}"]
    assert check(None) == (0, [])                  # unpinned: the file need only exist
    (data / "init.pt").unlink()
    assert check(None) == (1, ["init.pt: no such checkpoint file"])


def test_preflight_check_finds_a_missing_exist_onnx_path(digits_dir, tmp_path):
    """An inference round's exist_onnx_path, from the plan through the requests filter to
    flagperf_host.data_check as preflight runs it on a (remote) host: a file under the data
    folder, or absolute."""
    import json
    import shutil

    from filter_plugins_loader import load_plugin

    data = tmp_path / "data"
    shutil.copytree(digits_dir, data)
    module = load_plugin("plugins/filter/flagperf_data.py")

    def check(onnx: str) -> tuple[int, list[str]]:
        rounds = [{"case_id": "resnet50-pytorch-inference", "data_dir": str(data),
                   "data_format": "imagenet", "config": {"exist_onnx_path": onnx}}] * 2
        requests = module.flagperf_data_requests(rounds)
        assert len(requests) == 1 and requests[0]["onnx"] == onnx
        done = subprocess.run(host_side.command("data_check", json.dumps(requests)),
                              env=host_side.env(), capture_output=True, text=True, timeout=60,
                              cwd="/")
        return done.returncode, json.loads(done.stdout)["results"][0]["problems"]

    rc, problems = check("model.onnx")
    assert rc == 1 and problems[0].startswith("model.onnx: no such ONNX file (exist_onnx_path")
    (data / "model.onnx").write_bytes(b"onnx")
    assert check("model.onnx") == (0, [])
    assert check(str(data / "model.onnx")) == (0, [])
    assert check(str(tmp_path / "elsewhere.onnx"))[0] == 1


def test_a_checkpoint_is_pinned_or_says_why_not_and_a_profile_brings_its_own(scratch_project):
    sha = "ab" * 32
    for text, message in [
            ("checkpoint: {path: init.npz}", "give sha256, or unpinned"),
            (f"checkpoint: {{path: init.npz, sha256: '{sha}', unpinned: no checksum}}",
             "give sha256, or unpinned")]:
        edit(scratch_project, CASE, "data: {format: imagenet}",
             f"data: {{format: imagenet}}\n{text}")
        with pytest.raises(ConfigError, match=f"{CASE}: checkpoint: .*{message}"):
            load_case(scratch_project, "resnet50", "pytorch")
        edit(scratch_project, CASE, f"\n{text}", "")
    edit(scratch_project, CASE, "data: {format: imagenet}",
         "data: {format: imagenet}\ncheckpoint: {path: big.npz, unpinned: its publisher gives none}")
    standard = plan_for(scratch_project, {
        "flagperf_vendor": "nvidia",
        "flagperf_cases": [{**GOOD_CASE, "hardware": "A100", "nproc_per_node": 8}]})["rounds"][0]
    assert standard["checkpoint"] == {"path": "big.npz", "sha256": None,
                                      "unpinned": "its publisher gives none"}
    edit(scratch_project, PROFILE, "params:",
         f"checkpoint: {{path: small.npz, sha256: '{sha}'}}\nparams:")
    profile = plan_for(scratch_project, {"flagperf_cases": [GOOD_CASE]})["rounds"][0]
    assert profile["checkpoint"] == {"path": "small.npz", "sha256": sha, "unpinned": ""}
    assert profile["profile"]["checkpoint"] == profile["checkpoint"]


CPM_CASE = "benchmarks/cpm/pytorch/case.yml"
CPM_PROFILE = "benchmarks/cpm/pytorch/config/cpu.yaml"


def test_a_further_target_is_in_effect_where_its_key_is_set(scratch_project):
    """cpm's ``also_targets`` (the validation loss): in the contract, not in effect in the
    standard configuration (``target_loss`` null), in effect in the cpu profile, whose
    baselines name it as the target that must clear them."""
    case = load_case(scratch_project, "cpm", "pytorch")
    assert case.contract()["also_targets"] == [
        {"metric": "final_loss", "comparison": "<=", "config_key": "target_loss"}]
    assert active_targets(case, case.standard.params) == [case.spec.target]
    label, params = profile_of(scratch_project, case, "cpu")
    effective = {**case.standard.params, **params}
    assert [t.metric for t in active_targets(case, effective)] == [
        "final_embedding_average", "final_loss"]
    assert label["baselines"]["target"] == "final_loss" and params["evaluate_baselines"]


@pytest.mark.parametrize("relative, old, new, where, message", [
    (CPM_CASE, "{metric: final_loss, comparison: \"<=\"", "{metric: final_los, comparison: \"<=\"",
     f"{CPM_CASE}: also_targets", "also_targets[0].metric 'final_los' is not one of metrics"),
    (CPM_CASE, "{metric: final_loss, comparison: \"<=\"", "{metric: final_loss, comparison: \">=\"",
     f"{CPM_CASE}: also_targets", "also_targets[0].comparison '>=' contradicts"),
    (CPM_CASE, "config_key: target_loss}", "config_key: target_los}",
     f"{CPM_CASE}: also_targets[0].config_key", "'target_los' is not a key of"),
    (CPM_PROFILE, "target: final_loss", "target: final_accuracy",
     f"{CPM_PROFILE}: profile.baselines.target", "'final_accuracy' is not a target of this "
                                                 "profile (final_embedding_average, final_loss)"),
])
def test_a_bad_further_target_is_one_line_naming_file_and_key(scratch_project, relative, old,
                                                               new, where, message):
    edit(scratch_project, relative, old, new)
    with pytest.raises(ConfigError) as caught:
        case = load_case(scratch_project, "cpm", "pytorch")
        profile_of(scratch_project, case, "cpu")
    shown = str(caught.value)
    assert shown.startswith(where) and message in shown and "\n" not in shown, shown


def test_case_requirements_go_into_the_image_and_its_tag(scratch_project):
    docker = {"flagperf_container_runtime": "docker", "flagperf_cases": [GOOD_CASE]}
    before = plan_for(scratch_project, docker)["images"]["pytorch"]
    assert before["requirements"] == []
    edit(scratch_project, CASE, "data: {format: imagenet}",
         "data: {format: imagenet}\nrequirements: ['timm>=1.0']")
    after = plan_for(scratch_project, docker)["images"]["pytorch"]
    assert after["requirements"] == ["timm>=1.0"] and after["tag"] != before["tag"]


EFFICIENTNET = {**GOOD_CASE, "model": "efficientnet", "repeat": 1}
EFFICIENTNET_PROFILE = "benchmarks/efficientnet/pytorch/config/cpu.yaml"


def test_a_global_batch_profile_trains_each_process_on_its_share(scratch_project):
    """efficientnet's cpu profile keeps its global batch of 32: 16 a process at 2x1, recorded
    in the round's profile label; 1x1 keeps all of it."""
    plan = plan_for(scratch_project, {"flagperf_cases": [EFFICIENTNET,
                                                         {**EFFICIENTNET, "nnodes": 2}]},
                    hosts=("localhost", "second"))
    single, spread = plan["rounds"]
    assert single["config"]["train_batch_size"] == 32
    assert spread["config"]["train_batch_size"] == 16
    assert spread["overrides"] == {}
    assert spread["profile"]["scaling"]["applied"] == {"train_batch_size": 16}
    assert single["profile"]["scaling"]["applied"] == {"train_batch_size": 32}


def test_a_per_topology_profile_sets_the_topologys_params(scratch_project):
    round_ = plan_for(scratch_project, {"flagperf_cases": [
        {**GOOD_CASE, "nproc_per_node": 2}]})["rounds"][0]
    assert (round_["config"]["train_batch_size"], round_["config"]["learning_rate"],
            round_["config"]["seed"]) == (16, 0.05, 7)


@pytest.mark.parametrize("case, topology, supported", [
    (GOOD_CASE, (2, 2), "1x1, 1x2, 2x1 (per_topology)"),
    (EFFICIENTNET, (1, 2), "1x1, 2x1 (global_batch)"),
    ({**GOOD_CASE, "model": "mobilenetv2"}, (1, 2), "1x1 (per_topology)"),
])
def test_a_topology_the_profile_does_not_hold_at_is_refused_in_one_line(
        scratch_project, case, topology, supported):
    """Refused while the plan is built, before any host is touched: the case, the topology
    and the topologies its profile holds at, in one line."""
    nnodes, nproc = topology
    with pytest.raises(ConfigError) as caught:
        plan_for(scratch_project, {"flagperf_cases": [
            {**case, "nnodes": nnodes, "nproc_per_node": nproc}]}, hosts=("one", "two"))
    message = str(caught.value)
    assert "\n" not in message and message.endswith(
        f"group_vars/all.yml: flagperf_cases[0]: case {case['model']}:pytorch "
        f"on profile cpu holds its target at {supported}, not at {nnodes}x{nproc} (nnodes x "
        "nproc_per_node; config/cpu.yaml profile.scaling)"), message


def test_a_global_batch_that_does_not_divide_is_refused(scratch_project):
    edit(scratch_project, EFFICIENTNET_PROFILE, "topologies: [1x1, 2x1]",
         "topologies: [1x1, 2x1, 1x3]")
    with pytest.raises(ConfigError, match=re.escape(
            f"{EFFICIENTNET_PROFILE}: profile.scaling.topologies: the global batch "
            "train_batch_size 32 does not divide among the 3 processes of 1x3")):
        plan_for(scratch_project, {"flagperf_cases": [EFFICIENTNET]})


@pytest.mark.parametrize("old, new, where, message", [
    ("topologies: [1x1, 2x1]", "topologies: [1x1, 2by1]", "profile.scaling.topologies",
     "'2by1' is not a topology"),
    ("batch_key: train_batch_size", "batch_key: train_batch", "profile.scaling.batch_key",
     "'train_batch' is not a key of config/standard.yaml params"),
    ("rule: global_batch", "rule: per_topology", "profile.scaling",
     "rule per_topology: give topologies as a mapping"),
])
def test_a_malformed_scaling_is_one_line_naming_file_and_key(scratch_project, old, new, where,
                                                             message):
    edit(scratch_project, EFFICIENTNET_PROFILE, old, new)
    with pytest.raises(ConfigError, match=re.escape(f"{EFFICIENTNET_PROFILE}: {where}: "
                                                    f"{message}")):
        plan_for(scratch_project, {"flagperf_cases": [EFFICIENTNET]})


def test_a_profile_whose_target_means_learning_says_where_it_holds(scratch_project):
    """Every training case's cpu profile declares its scaling; one without it is refused."""
    for case in list_cases(ROOT):
        if case.suite == "training":
            label, _ = profile_of(ROOT, case, "cpu")
            assert label["scaling"] and label["scaling"]["why"], case.key
    path = scratch_project / EFFICIENTNET_PROFILE
    document = yaml.safe_load(path.read_text())
    del document["profile"]["scaling"]
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match=re.escape(
            f"{EFFICIENTNET_PROFILE}: profile: a profile with baselines")):
        plan_for(scratch_project, {"flagperf_cases": [EFFICIENTNET]})
