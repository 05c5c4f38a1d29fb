import pytest

from flagperf_ansible.config.casespec import CaseSpec, parse_case_key, parse_case_spec
from flagperf_ansible.config.errors import ConfigError


def test_flagperf_key_and_mapping_give_the_same_spec():
    from_key = parse_case_spec({"resnet50:pytorch:A100:2:8:3": "/data/imagenet"})
    from_mapping = parse_case_spec({"model": "resnet50", "framework": "pytorch",
                                    "hardware": "A100", "nnodes": 2, "nproc_per_node": 8,
                                    "repeat": 3, "data_dir": "/data/imagenet"})
    assert from_key == from_mapping
    assert from_key.case_id == "resnet50-pytorch-A100x2x8"
    assert from_key.hardware_config == "A100x2x8"


def test_the_suite_form_that_cases_lists_and_a_data_dir_after_the_key():
    spec = parse_case_spec("resnet50:pytorch:inference:cpu:1:1:2=data/digits")
    assert (spec.suite, spec.hardware, spec.repeat, spec.data_dir) == (
        "inference", "cpu", 2, "data/digits")
    assert spec.case_id == "resnet50-pytorch-inference-cpux1x1"
    assert parse_case_spec("computation:pytorch:base:cpu:1:1:1").suite == "base"
    assert parse_case_spec("resnet50:pytorch:training:cpu:1:1:1=d") == parse_case_spec(
        {"resnet50:pytorch:cpu:1:1:1": "d"})


def test_bare_key_has_no_data_dir_and_default_timeout():
    spec = parse_case_spec("sleep:pytorch:cpu:1:1:2")
    assert (spec.model, spec.nnodes, spec.nproc_per_node, spec.repeat) == ("sleep", 1, 1, 2)
    assert spec.data_dir == "" and spec.timeout is None


@pytest.mark.parametrize("key, fragment", [
    ("resnet50:pytorch:A100:1:8", "is not 'model:framework"),
    ("resnet50:pytorch:A100:1:8:1:9", "suite one of training, inference, base"),
    ("resnet50:pytorch:A100:one:8:1", "nnodes 'one' is not an integer"),
])
def test_malformed_keys(key, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_case_key(key)


@pytest.mark.parametrize("item, key, fragment", [
    ("resnet50:pytorch:cpu:0:1:1", "flagperf_cases[0].nnodes", "greater than 0"),
    ("resnet50:pytorch:cpu:1:1:-2", "flagperf_cases[0].repeat", "greater than 0"),
    ({"model": "resnet50", "framework": "pytorch", "hardware": "cpu", "nnodes": 1,
      "nproc_per_node": 1, "batch": 3}, "flagperf_cases[0].batch", "unknown key"),
    ({"model": "resnet50", "framework": "pytorch", "hardware": "cpu", "nnodes": 1},
     "flagperf_cases[0].nproc_per_node", "required key is missing"),
    ({"model": "resnet50; rm -rf /", "framework": "pytorch", "hardware": "cpu",
      "nnodes": 1, "nproc_per_node": 1}, "flagperf_cases[0].model", "not a safe name"),
    ({"resnet50:pytorch:cpu:1:1:1": "../../etc"}, "flagperf_cases[0].data_dir",
     "not a safe path"),
    ({"resnet50:pytorch:cpu:1:1:1": "/data/$(reboot)"}, "flagperf_cases[0].data_dir",
     "not a safe path"),
    (42, "flagperf_cases[0]", "not int"),
])
def test_bad_specs_name_file_and_key(item, key, fragment):
    with pytest.raises(ConfigError) as caught:
        parse_case_spec(item, "group_vars/all.yml", "flagperf_cases[0]")
    message = str(caught.value)
    assert message.startswith(f"group_vars/all.yml: {key}: "), message
    assert fragment in message
    assert "\n" not in message


def test_filter_plugin_exposes_the_same_parser():
    from filter_plugins_loader import load_filters

    filters = load_filters()
    spec = filters["flagperf_case_spec"]("resnet50:pytorch:A100:1:8:1")
    assert spec["case_id"] == "resnet50-pytorch-A100x1x8"
    assert CaseSpec(**{k: v for k, v in spec.items() if k != "case_id"}).case_id == spec["case_id"]


def test_a_named_profile_replaces_the_hardware_s_own(project):
    from flagperf_ansible.config.cases import effective_config, load_case

    case = load_case(project, "resnet50", "pytorch")
    spec = {"model": "resnet50", "framework": "pytorch", "nnodes": 1, "nproc_per_node": 1}
    quick = effective_config(project, case, parse_case_spec({**spec, "hardware": "H100",
                                                             "profile": "quick"}), "nvidia")
    assert quick.profile["name"] == "quick" and not quick.profile["standard"]
    assert (quick.config["epochs"], quick.config["max_steps"]) == (1, 300)
    # The vendor's H100x1x1 still applies over the profile: FlagPerf's 1x1 batch of 256.
    assert quick.config["train_crop_size"] == 224 and quick.config["train_batch_size"] == 256
    # On cpu hardware the named profile stands instead of config/cpu.yaml, not on top of it.
    on_cpu = effective_config(project, case, parse_case_spec({**spec, "hardware": "cpu",
                                                              "profile": "quick"}), "cpu")
    assert on_cpu.profile["name"] == "quick" and on_cpu.config["train_crop_size"] == 224
    plain = effective_config(project, case, parse_case_spec({**spec, "hardware": "H100"}),
                             "nvidia")
    assert plain.profile is None and plain.config["max_steps"] == 0


def test_a_profile_the_case_lacks_is_one_line_naming_file_and_entry(project, tmp_path):
    import subprocess
    import sys

    cases = tmp_path / "cases.yml"
    cases.write_text("flagperf_cases:\n  - {model: resnet50, framework: pytorch, hardware: cpu,"
                     " nnodes: 1, nproc_per_node: 1, data_dir: data/digits, profile: quik}\n")
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "validate", "-i",
                           str(project / "inventories/local"), "-e", f"@{cases}"],
                          capture_output=True, text=True, cwd=project)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"flagperf-ansible: {cases}: flagperf_cases[0]: profile: case resnet50:pytorch has no "
        "profile 'quik' (config/quik.yaml; it has: cpu, quick)")
    with pytest.raises(ConfigError, match=r"flagperf_cases\[0\]\.profile: .*not a safe name"):
        parse_case_spec({"model": "resnet50", "framework": "pytorch", "hardware": "cpu",
                         "nnodes": 1, "nproc_per_node": 1, "profile": "../cpu"}, "g.yml",
                        "flagperf_cases[0]")
