"""README's "Adding a case", done as it says: its worked example's files written into a scratch
copy of the checkout (tests/checkout_copy.py), nothing else changed, then the case listed and
validated by the controller, its model built from case.yml, and its cpu profile trained a few
updates on the digits through the launch's argv and environment (torchrun, ``python -m
driver.run``): a case is data."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from case_model import torch_finished_keys
from checkout_copy import copy_checkout
from driver.run import Case
from flagperf_ansible.config.cases import effective_config, list_cases, load_case
from flagperf_ansible.config.casespec import CaseSpec
from flagperf_ansible.config.launchers import launch_argv, launch_env
from flagperf_ansible.results.perflog import parse_rank_log
from test_recipe_sources import source_problems

ROOT = Path(__file__).resolve().parents[1]
#: torchvision's resnet18 with 10 outputs: 11,689,512 with 1000 (ResNet18_Weights num_params)
#: less 512 x 990 weights and 990 biases of the head.
RESNET18_10_CLASSES = 11_689_512 - 513 * 990


def worked_example(readme: Path) -> dict[str, str]:
    """The files of README's "Adding a case": each fenced block after a line naming its path
    (`` `benchmarks/.../file`: ``)."""
    text = readme.read_text(encoding="utf-8")
    section = text.split("\n### Adding a case\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    return dict(re.findall(r"^`(benchmarks/[^`]+)`:\n\n```yaml\n(.*?)^```$", section,
                           flags=re.M | re.S))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    project = copy_checkout(tmp_path_factory.mktemp("checkout"))
    files = worked_example(ROOT / "README.md")
    assert sorted(files) == ["benchmarks/resnet18/pytorch/case.yml",
                             "benchmarks/resnet18/pytorch/config/cpu.yaml",
                             "benchmarks/resnet18/pytorch/config/sources.yaml",
                             "benchmarks/resnet18/pytorch/config/standard.yaml"]
    for relative, text in files.items():
        (project / relative).parent.mkdir(parents=True, exist_ok=True)
        (project / relative).write_text(text)
    return project


def test_the_worked_example_is_a_case_the_controller_accepts(project):
    assert "resnet18:pytorch" in {case.key for case in list_cases(project)}
    case = load_case(project, "resnet18", "pytorch")
    assert case.spec.driver == "driver.torch.classification"
    # What the driver builds from case.yml's builder and arguments: torchvision's resnet18.
    with torch.device("meta"):
        model = Case.from_folder(case.directory).build_model(
            dict(case.standard.params), num_classes=10)
    assert sum(p.numel() for p in model.parameters()) == RESNET18_10_CLASSES


def test_the_worked_example_names_the_source_of_every_standard_key(project):
    config = project / "benchmarks/resnet18/pytorch/config"
    keys = list(yaml.safe_load((config / "standard.yaml").read_text())["params"])
    assert source_problems(keys, yaml.safe_load((config / "sources.yaml").read_text()),
                           "sources.yaml") == []


def test_the_worked_example_trains_through_the_one_entry(project, digits_dir, tmp_path):
    """One round of its cpu profile cut to 4 updates (the profile's convergence is what
    ``make run`` checks for the catalog's cases; this checks the case runs as data): the
    model is torchvision's resnet18, built from case.yml's builder and arguments."""
    spec = CaseSpec(model="resnet18", framework="pytorch", hardware="cpu", nnodes=1,
                    nproc_per_node=1)
    config = effective_config(project, load_case(project, "resnet18", "pytorch"), spec,
                              "cpu").config
    config.update(max_steps=4, epochs=1)
    out = tmp_path / "node0"
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump(config))
    round_ = {"launcher": "torchrun", "entry": None, "case_dir": "benchmarks/resnet18/pytorch",
              "model": "resnet18", "framework": "pytorch", "nnodes": 1, "nproc_per_node": 1,
              "nodes": ["127.0.0.1"], "master_addr": "127.0.0.1", "env": {},
              "vendor_dir": "vendors/cpu"}
    argv = launch_argv(round_, 0, sys.executable, str(project), str(out), str(digits_dir), 0)
    assert argv[argv.index("driver.run") - 1:argv.index("driver.run") + 3] == [
        "-m", "driver.run", "--case", f"{project}/benchmarks/resnet18/pytorch"]
    env = {**os.environ, **launch_env(round_, 0, str(project), 0), "OMP_NUM_THREADS": "2"}
    done = subprocess.run(argv, cwd=out, env=env, capture_output=True, text=True, timeout=300)
    log = (out / "rank0.out.log").read_text(errors="replace") \
        if (out / "rank0.out.log").is_file() else ""
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:] + log[-3000:]
    parsed = parse_rank_log(out / "rank0.out.log")
    assert set(parsed.finished) >= torch_finished_keys("acc1")
    assert parsed.finished["global_steps"] == 4
