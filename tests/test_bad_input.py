"""Malformed input, through the real command line: exit 2, one line naming the file and key,
and nothing run.

Every case writes a small inventory under its own folder and runs ``flagperf_ansible run`` (or
``validate``) from there, so files are named relative to it. Most run in this process through
``cli.main``, with the command's arguments, working folder and environment. A handful
(``SUBPROCESS``) run as ``python -m flagperf_ansible`` in a process of their own, as a user
types them. "Nothing ran" is observed three ways: the results folder given with
``--results-dir`` is never created, no play started (for a subprocess, Ansible logs each play's
banner to ``ANSIBLE_LOG_PATH``: ``test_the_observables_see_a_run_that_starts`` shows it does so
for the wrapper too; the wrapper's own reading of the inventory through Ansible may open that
log, and plays nothing), and ``run`` printed nothing (it announces the run before starting
Ansible). The hosts sit at a loopback address and port nothing listens on, so a run that
slipped through could not succeed quietly either.

A few cases also go through ``ansible-playbook site.yml``: they stop in the controller's
preflight play, before the host play starts.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: Nothing listens here: port 9 on an address of this work tree's loopback range.
DEAD_ADDRESS, DEAD_PORT = "127.0.1.254", 9
SLEEP = {"model": "sleep", "framework": "pytorch", "hardware": "cpu", "nnodes": 1,
         "nproc_per_node": 1}
RESNET = {"model": "resnet50", "framework": "pytorch", "hardware": "cpu", "nnodes": 1,
          "nproc_per_node": 1, "data_dir": "data/digits"}
INFERENCE = {**RESNET, "suite": "inference"}
BASE_VENDOR = "vendors/cpu/base"
BASE_PROFILE = ("profile: {{description: a sweep, reduced: [steps]}}\n"
                "params: {{min_bytes: {low}, max_bytes: {high}, factor: 4, warmup: 1, "
                "iterations: 2}}\n")


def base(model: str) -> dict:
    """A base case's spec on the cpu vendor, one process."""
    return {"model": model, "framework": "pytorch", "suite": "base", "hardware": "cpu",
            "nnodes": 1, "nproc_per_node": 1, "repeat": 1}
VENDOR_CONFIG = "vendors/cpu/inference/resnet50-pytorch/vendor_config/cpu_configurations.yaml"
INFERENCE_PROFILE = "benchmarks/inference/resnet50/pytorch/config/cpu.yaml"
#: The host play's task names (playbooks/preflight.yml and the roles it runs on the hosts).
HOST_TASKS = ("Reach the benchmark hosts and check them",
              "Trust each host's ssh key and authorize the controller",
              "Check each host can run its rounds", "Read the host's ssh key from the controller",
              "Check the data folders of this host's cases")


def hosts_tree(*names: str, **host_vars: Any) -> dict[str, Any]:
    """An inventory whose group flagperf_hosts holds ``names``, the first at the dead address,
    each further one at the next address down (two hosts may not share an address and port)."""
    prefix, last = DEAD_ADDRESS.rsplit(".", 1)
    return {"all": {"children": {"flagperf_hosts": {"hosts": {
        name: {"ansible_host": f"{prefix}.{int(last) - index}", "ansible_port": DEAD_PORT,
               **host_vars}
        for index, name in enumerate(names)}}}}}


def group(body: Any) -> dict[str, Any]:
    """An inventory whose group flagperf_hosts is ``body``."""
    return {"all": {"children": {"flagperf_hosts": body}}}


def cases(*items: Any) -> dict[str, Any]:
    return {"flagperf_cases": list(items)}


@dataclass
class Bad:
    """One malformed input and the line it must produce."""

    id: str
    #: ``<file>: <key>`` (or ``<file>`` alone) the line must name, relative to tmp_path.
    where: str
    #: What the line must say is wrong.
    says: str
    #: group_vars/all.yml: a mapping, or raw text.
    vars: Any = field(default_factory=lambda: cases(SLEEP))
    #: hosts.yml: a mapping, or raw text.
    hosts: Any = field(default_factory=lambda: hosts_tree("node1"))
    #: Further inventory files by path under the inventory folder (text, or bytes as they are).
    files: dict[str, str | bytes] = field(default_factory=dict)
    #: Edits of a scratch copy of the project: path -> text (or bytes as they are), or None to
    #: delete.
    project: dict[str, str | bytes | None] = field(default_factory=dict)
    #: ``run`` (with --results-dir) or ``validate``.
    command: str = "run"
    args: tuple[str, ...] = ()
    inventory: str = "inv"


ACME = "name: acme\nhardware: [cpu]\ncontainer: {privileged: false}\n"

CORPUS = [
    # -- inventory structure -------------------------------------------------------------------
    Bad("inventory-missing", "nowhere", "no such inventory file or directory",
        inventory="nowhere"),
    Bad("inventory-dir-without-hosts-yml", "inv", "no inventory source in this folder",
        hosts=None),
    Bad("inventory-bad-yaml", "inv/hosts.yml: line ", "",
        hosts="all:\n  children:\n    flagperf_hosts: {hosts: [node1\n"),
    Bad("inventory-not-a-mapping", "inv/hosts.yml", "it should be a dictionary, got: a list",
        hosts=["node1"]),
    Bad("inventory-without-group-flagperf_hosts", "inv", "no group 'flagperf_hosts'",
        hosts={"all": {"hosts": {"node1": {"ansible_host": DEAD_ADDRESS}}}}),
    Bad("inventory-group-without-hosts", "inv/hosts.yml: flagperf_hosts", "the group has no hosts",
        hosts=group(None)),
    Bad("inventory-hosts-a-list", "inv/hosts.yml",
        "group, requires a dictionary, found a list",
        hosts=group({"hosts": ["node1", "node2"]})),
    Bad("inventory-children-a-string", "inv/hosts.yml: flagperf_hosts",
        "the group has no hosts",
        hosts={"all": {"children": "flagperf_hosts"}}),
    Bad("inventory-group-key-typo", "inv/hosts.yml: flagperf_hosts",
        "Skipping unexpected key (host) in group (flagperf_hosts)",
        hosts=group({"host": {"node1": None}})),
    Bad("inventory-host-vars-a-number", "inv/hosts.yml", "expected dictionary",
        hosts=group({"hosts": {"node1": 5}})),
    Bad("host-name-with-shell-metacharacters", "inv/hosts.yml: flagperf_hosts.node1;reboot",
        "not a safe host name", hosts=hosts_tree("node1;reboot")),
    Bad("ansible_host-read-as-an-ssh-option", "inv/hosts.yml: flagperf_hosts.node1.ansible_host",
        "not a host name or IP address", hosts=hosts_tree("node1", ansible_host="-oProxyCommand=id")),
    Bad("ansible_port-out-of-range", "inv/hosts.yml: flagperf_hosts.node1.ansible_port",
        "not a port (1..65535)", hosts=hosts_tree("node1", ansible_port=70000)),
    Bad("ansible_port-in-host_vars-not-a-number",
        "inv/host_vars/node1.yml: flagperf_hosts.node1.ansible_port", "'ssh' is not a port",
        files={"host_vars/node1.yml": "ansible_port: ssh\n"}),
    Bad("two-hosts-at-one-address-and-port", "inv/hosts.yml: flagperf_hosts.node2.ansible_host",
        f"the same address and port as host node1 ({DEAD_ADDRESS}:{DEAD_PORT})",
        hosts=hosts_tree("node1", "node2", ansible_host=DEAD_ADDRESS)),
    Bad("strict-host-keys-without-the-known_hosts-file",
        "inv/group_vars/all.yml: flagperf_known_hosts_file", "does not exist on the controller",
        vars={**cases(SLEEP), "flagperf_ssh_strict_host_keys": True,
              "flagperf_known_hosts_file": "/nonexistent/known_hosts"}),
    Bad("ansible_user-with-a-space", "inv/hosts.yml: flagperf_hosts.node1.ansible_user",
        "not a safe user name", hosts=hosts_tree("node1", ansible_user="bench user")),
    Bad("group_vars-not-a-mapping", "inv/group_vars/all.yml", "expected a mapping of variables",
        vars="- flagperf_vendor: cpu\n"),
    # -- encodings: Ansible reads UTF-8 only --------------------------------------------------
    Bad("group_vars-saved-as-utf-16", "inv/group_vars/all.yml", "saved as UTF-16",
        files={"group_vars/all.yml": "flagperf_cases: [sleep:pytorch:cpu:1:1:1]\n".encode("utf-16")}),
    Bad("hosts-saved-as-latin-1", "inv/hosts.yml", "not UTF-8 text (byte 0xe9 at line 1)",
        files={"hosts.yml": "# h\xe9tes\nall: {children: {flagperf_hosts: {hosts: {node1: {}}}}}\n"
               .encode("latin-1")}),
    Bad("two-files-joined-with-a-byte-order-mark", "inv/group_vars/all.yml",
        "a byte-order mark (U+FEFF) at line 2",
        files={"group_vars/all.yml": "flagperf_vendor: cpu\n\ufeffflagperf_cases: [sleep:pytorch:cpu:1:1:1]\n"}),
    Bad("group_vars-bad-yaml", "inv/group_vars/all.yml: line ", "",
        vars="flagperf_cases: [a, b\nflagperf_vendor: cpu\n"),
    # -- case specs -----------------------------------------------------------------------------
    Bad("unknown-model", "inv/group_vars/all.yml: flagperf_cases[0]",
        "no case llama2_7b:pytorch", vars=cases("llama2_7b:pytorch:cpu:1:1:1")),
    Bad("unknown-framework", "inv/group_vars/all.yml: flagperf_cases[0]",
        "no case sleep:tensorflow", vars=cases("sleep:tensorflow:cpu:1:1:1")),
    Bad("hardware-the-vendor-does-not-declare", "inv/group_vars/all.yml: flagperf_cases[0].hardware",
        "vendor cpu declares no hardware 'A100'", vars=cases("sleep:pytorch:A100:1:1:1")),
    Bad("nnodes-above-the-hosts", "inv/group_vars/all.yml: flagperf_cases[0].nnodes",
        "nnodes 3 is more than the 2 host(s)", vars=cases("sleep:pytorch:cpu:3:1:1"),
        hosts=hosts_tree("node1", "node2")),
    Bad("nproc-zero", "inv/group_vars/all.yml: flagperf_cases[0].nproc_per_node",
        "greater than 0", vars=cases({**SLEEP, "nproc_per_node": 0})),
    Bad("repeat-negative-in-a-flagperf-key", "inv/group_vars/all.yml: flagperf_cases[0].repeat",
        "greater than 0", vars=cases("sleep:pytorch:cpu:1:1:-2")),
    Bad("timeout-zero", "inv/group_vars/all.yml: flagperf_cases[0].timeout", "greater than 0",
        vars=cases({**SLEEP, "timeout": 0})),
    # A plan has an entry per round: a count typed with too many digits is refused, not planned.
    Bad("repeat-ten-to-the-21", "inv/group_vars/all.yml: flagperf_cases[0].repeat",
        "less than or equal to 1000", vars=cases("sleep:pytorch:cpu:1:1:1000000000000000000000")),
    Bad("timeout-beyond-two-weeks", "inv/group_vars/all.yml: flagperf_cases[0].timeout",
        "less than or equal to 1209600", vars=cases({**SLEEP, "timeout": 10 ** 9})),
    Bad("nnodes-a-boolean", "inv/group_vars/all.yml: flagperf_cases[0].nnodes",
        "expected a number, not true", vars=cases({**SLEEP, "nnodes": True})),
    Bad("unknown-key-in-a-spec", "inv/group_vars/all.yml: flagperf_cases[0].batch_size",
        "unknown key", vars=cases({**SLEEP, "batch_size": 8})),
    Bad("flagperf-key-with-five-fields", "inv/group_vars/all.yml: flagperf_cases[0]",
        "is not 'model:framework[:suite]:hardware:nnodes:nproc:repeat[=DATA_DIR]'",
        vars=cases("sleep:pytorch:cpu:1:1")),
    Bad("flagperf-key-with-a-word-for-a-count", "inv/group_vars/all.yml: flagperf_cases[0]",
        "nproc_per_node 'eight' is not an integer", vars=cases("sleep:pytorch:cpu:1:eight:1")),
    Bad("spec-a-number", "inv/group_vars/all.yml: flagperf_cases[0]", "not int", vars=cases(42)),
    Bad("case-listed-twice", "inv/group_vars/all.yml: flagperf_cases[1]", "listed twice",
        vars=cases(SLEEP, "sleep:pytorch:cpu:1:1:3")),
    Bad("case-needs-data_dir", "inv/group_vars/all.yml: flagperf_cases[0].data_dir",
        "this case needs data_dir: data_dir in its entry, or on the command line --case "
        "SPEC=DATA_DIR", vars=cases("resnet50:pytorch:cpu:1:1:1")),
    # run checks a local host's data on the controller, as validate does, before any folder.
    Bad("local-host-data-folder-missing", "inv/group_vars/all.yml: flagperf_cases[0].data_dir",
        "is not imagenet data", vars=cases({**RESNET, "data_dir": "/nonexistent/digits"}),
        hosts=group({"hosts": {"localhost": {"ansible_connection": "local"}}})),
    Bad("data_dir-climbs-out", "inv/group_vars/all.yml: flagperf_cases[0].data_dir",
        "not a safe path", vars=cases({"resnet50:pytorch:cpu:1:1:1": "data/../../etc"})),
    Bad("data_dir-with-a-newline", "inv/group_vars/all.yml: flagperf_cases[0].data_dir",
        "not a safe path", vars=cases({**RESNET, "data_dir": "data/digits\n"})),
    Bad("data_dir-read-as-an-option", "inv/group_vars/all.yml: flagperf_cases[0].data_dir",
        "not a safe path", vars=cases({**RESNET, "data_dir": "--help"})),
    Bad("model-with-shell-metacharacters", "inv/group_vars/all.yml: flagperf_cases[0].model",
        "not a safe name", vars=cases({**SLEEP, "model": "sleep$(reboot)"})),
    Bad("command-line-case-malformed", "command line: flagperf_cases[0]",
        "(suite one of training, inference, base)", args=("--case", "sleep:pytorch")),
    Bad("command-line-case-with-an-unknown-suite", "command line: flagperf_cases[0]",
        "(suite one of training, inference, base)",
        args=("--case", "resnet50:pytorch:inferance:cpu:1:1:1=data/digits")),
    Bad("command-line-case-data_dir-climbs-out", "command line: flagperf_cases[0].data_dir",
        "not a safe path", args=("--case", "resnet50:pytorch:cpu:1:1:1=../../etc")),
    Bad("command-line-case-needs-data_dir", "command line: flagperf_cases[0].data_dir",
        "--case SPEC=DATA_DIR", args=("--case", "resnet50:pytorch:inference:cpu:1:1:1")),
    # -- settings -------------------------------------------------------------------------------
    Bad("unknown-setting", "inv/group_vars/all.yml: flagperf_vendr", "unknown setting",
        vars={**cases(SLEEP), "flagperf_vendr": "cpu"}),
    Bad("unknown-vendor", "inv/group_vars/all.yml: flagperf_vendor", "no vendor 'acme'",
        vars={**cases(SLEEP), "flagperf_vendor": "acme"}),
    Bad("vendor-name-climbs-out", "inv/group_vars/all.yml: flagperf_vendor", "not a safe name",
        vars={**cases(SLEEP), "flagperf_vendor": "../cpu"}),
    Bad("master_port-above-65535", "inv/group_vars/all.yml: flagperf_master_port",
        "less than or equal to 65535", vars={**cases(SLEEP), "flagperf_master_port": 70000}),
    Bad("master_port-zero", "inv/group_vars/all.yml: flagperf_master_port",
        "greater than or equal to 1024", vars={**cases(SLEEP), "flagperf_master_port": 0}),
    Bad("master_port-a-word", "inv/group_vars/all.yml: flagperf_master_port", "valid integer",
        vars={**cases(SLEEP), "flagperf_master_port": "high"}),
    Bad("master_port-in-the-host-group-vars",
        "inv/group_vars/flagperf_hosts.yml: flagperf_master_port", "valid integer",
        files={"group_vars/flagperf_hosts.yml": "flagperf_master_port: 29500.5\n"}),
    Bad("setting-typo-in-host_vars", "inv/host_vars/node1.yml: flagperf_pythn", "unknown setting",
        files={"host_vars/node1.yml": "flagperf_pythn: /usr/bin/python3\n"}),
    Bad("runtime-unknown", "inv/group_vars/all.yml: flagperf_container_runtime", "'none'",
        vars={**cases(SLEEP), "flagperf_container_runtime": "podman"}),
    Bad("clear_caches-not-a-boolean", "inv/group_vars/all.yml: flagperf_clear_caches",
        "valid boolean", vars={**cases(SLEEP), "flagperf_clear_caches": "sometimes"}),
    Bad("monitor_interval-zero", "inv/group_vars/all.yml: flagperf_monitor_interval",
        "greater than 0", vars={**cases(SLEEP), "flagperf_monitor_interval": 0}),
    Bad("workdir-relative", "inv/group_vars/all.yml: flagperf_workdir", "absolute path",
        vars={**cases(SLEEP), "flagperf_workdir": "tmp/flagperf"}),
    Bad("root-relative", "inv/group_vars/all.yml: flagperf_root", "absolute path",
        vars={**cases(SLEEP), "flagperf_root": "flagperf"}),
    Bad("python-with-a-command-after-it", "inv/group_vars/all.yml: flagperf_python",
        "not a safe path", vars={**cases(SLEEP), "flagperf_python": "python3; id"}),
    Bad("results_dir-climbs-out", "inv/group_vars/all.yml: flagperf_results_dir",
        "not a safe path", vars={**cases(SLEEP), "flagperf_results_dir": "../results"},
        command="validate"),
    Bad("command-line-results-dir-with-a-space", "command line: flagperf_results_dir",
        "not a safe path", args=("--results-dir", "my results")),
    Bad("run_id-not-a-run-id", "inv/group_vars/all.yml: flagperf_run_id", "not a run id",
        vars={**cases(SLEEP), "flagperf_run_id": "run1;id"}),
    Bad("env-name-with-a-space", "inv/group_vars/all.yml: flagperf_env",
        "'NCCL DEBUG' is not an environment variable name",
        vars={**cases(SLEEP), "flagperf_env": {"NCCL DEBUG": 1}}),
    Bad("env-value-with-a-newline", "inv/group_vars/all.yml: flagperf_env",
        "variable X: 'a\\nb' holds a line break", vars={**cases(SLEEP), "flagperf_env": {"X": "a\nb"}}),
    Bad("env-not-a-mapping", "inv/group_vars/all.yml: flagperf_env",
        "expected a mapping of variable names", vars={**cases(SLEEP), "flagperf_env": ["X=1"]}),
    Bad("base_image-not-a-reference", "inv/group_vars/all.yml: flagperf_base_image",
        "not an image reference", vars={**cases(SLEEP), "flagperf_base_image": "Debian 12"}),
    Bad("wheel-path-with-a-command", "inv/group_vars/all.yml: flagperf_image_wheels",
        "not a safe path", vars={**cases(SLEEP), "flagperf_image_wheels": ["/w/x.whl;id"]}),
    Bad("known_hosts_file-read-as-an-option", "inv/group_vars/all.yml: flagperf_known_hosts_file",
        "not a safe path", vars={**cases(SLEEP), "flagperf_known_hosts_file": "-oX"}),
    Bad("ssh_public_key-two-lines", "inv/group_vars/all.yml: flagperf_ssh_public_key",
        "not one OpenSSH public key line",
        vars={**cases(SLEEP), "flagperf_ssh_public_key": "ssh-ed25519 AAAA\nssh-rsa BBBB"}),
    Bad("pip_ca_bundle-with-a-substitution", "inv/group_vars/all.yml: flagperf_pip_ca_bundle",
        "not a safe path", vars={**cases(SLEEP), "flagperf_pip_ca_bundle": "$(id)"}),
    Bad("mask_hosts-not-a-boolean", "inv/group_vars/all.yml: flagperf_mask_hosts",
        "valid boolean", vars={**cases(SLEEP), "flagperf_mask_hosts": "perhaps"}),
    Bad("cases-empty", "roles/flagperf/defaults/main.yml: flagperf_cases", "at least 1 item",
        vars={}),
    Bad("cases-a-string", "inv/group_vars/all.yml: flagperf_cases", "valid list",
        vars={"flagperf_cases": "sleep:pytorch:cpu:1:1:1"}),
    Bad("select-no-such-round", "inv/group_vars/all.yml: flagperf_select", "no round",
        vars={**cases(SLEEP), "flagperf_select": "sleep-pytorch-cpux1x1/round9"}),
    # -- vendors --------------------------------------------------------------------------------
    Bad("vendor-without-an-image-for-the-framework", "inv/group_vars/all.yml: flagperf_cases[0]",
        "vendor acme has no image for framework pytorch "
        "(vendors/acme/docker_image/pytorch/Dockerfile)",
        vars={**cases(SLEEP), "flagperf_vendor": "acme", "flagperf_container_runtime": "docker"},
        project={"vendors/acme/vendor.yml": ACME}),
    Bad("vendor-privileged-a-string", "vendors/acme/vendor.yml: container.privileged",
        "valid boolean", vars={**cases(SLEEP), "flagperf_vendor": "acme"},
        project={"vendors/acme/vendor.yml": "name: acme\ncontainer: {privileged: 'yes'}\n"}),
    Bad("vendor-container-key-typo", "vendors/acme/vendor.yml: container.priviliged",
        "unknown key", vars={**cases(SLEEP), "flagperf_vendor": "acme"},
        project={"vendors/acme/vendor.yml": "name: acme\ncontainer: {priviliged: true}\n"}),
    Bad("vendor-bad-yaml", "vendors/acme/vendor.yml: line ", "",
        vars={**cases(SLEEP), "flagperf_vendor": "acme"},
        project={"vendors/acme/vendor.yml": "name: [acme\n"}),
    Bad("vendor-kit-saved-as-utf-16", "vendors/acme/vendor.yml", "saved as UTF-16",
        vars={**cases(SLEEP), "flagperf_vendor": "acme"},
        project={"vendors/acme/vendor.yml": ACME.encode("utf-16")}),
    Bad("vendor-datasheet-peak-infinite", "vendors/acme/vendor.yml: datasheet.cpu.peak_flops.fp32",
        "finite number", vars={**cases(SLEEP), "flagperf_vendor": "acme"},
        project={"vendors/acme/vendor.yml": ACME + "datasheet:\n  cpu:\n    peak_flops:\n"
                 "      source: a typo\n      fp32: .inf\n"}),
    Bad("vendor-datasheet-unit-of-the-wrong-kind",
        "vendors/acme/vendor.yml: datasheet.cpu.memory_bandwidth",
        "is not a bandwidth", vars={**cases(SLEEP), "flagperf_vendor": "acme"},
        project={"vendors/acme/vendor.yml": ACME + "datasheet:\n  cpu:\n    memory_bandwidth: "
                 "{value: 40, unit: GB, source: a typo}\n"}),
    Bad("vendor-override-in-latin-1",
        "vendors/cpu/resnet50-pytorch/config/cpux1x1.yaml", "not UTF-8 text (byte 0xe9 at line 1)",
        vars=cases(RESNET),
        project={"vendors/cpu/resnet50-pytorch/config/cpux1x1.yaml":
                 "# r\xe9glages\nlr: 0.2\n".encode("latin-1")}),
    Bad("base-vendor-config-joined-with-a-byte-order-mark",
        f"{BASE_VENDOR}/computation-pytorch/config/cpux1x1.yaml",
        "a byte-order mark (U+FEFF) at line 2", vars=cases(base("computation")),
        project={f"{BASE_VENDOR}/computation-pytorch/config/cpux1x1.yaml":
                 "iterations: 3\n\ufeffwarmup: 1\n"}),
    Bad("vendor-override-of-an-immutable-key",
        "vendors/cpu/resnet50-pytorch/config/cpux1x1.yaml: momentum", "not a mutable key",
        vars=cases(RESNET),
        project={"vendors/cpu/resnet50-pytorch/config/cpux1x1.yaml": "momentum: 0.5\n"}),
    # -- base micro-benchmarks -----------------------------------------------------------------
    Bad("base-vendor-negative-iterations",
        f"{BASE_VENDOR}/computation-pytorch/config/cpux1x1.yaml: iterations",
        "greater than 0", vars=cases(base("computation")),
        project={f"{BASE_VENDOR}/computation-pytorch/config/cpux1x1.yaml": "iterations: -50\n"}),
    Bad("base-vendor-unknown-precision",
        f"{BASE_VENDOR}/computation-pytorch/config/cpux1x1.yaml: precisions[1]",
        "should be 'fp64', 'fp32', 'tf32', 'fp16', 'bf16' or 'int8'",
        vars=cases(base("computation")),
        project={f"{BASE_VENDOR}/computation-pytorch/config/cpux1x1.yaml":
                 "precisions: [fp32, fp8]\n"}),
    Bad("base-profile-sweep-from-zero-bytes",
        "benchmarks/base/interconnect-h2d/pytorch/config/cpu.yaml: min_bytes", "greater than 0",
        vars=cases(base("interconnect-h2d")),
        project={"benchmarks/base/interconnect-h2d/pytorch/config/cpu.yaml":
                 BASE_PROFILE.format(low=0, high=16777216)}),
    Bad("base-profile-sweep-upside-down",
        "benchmarks/base/interconnect-h2d/pytorch/config/cpu.yaml: min_bytes",
        "above max_bytes 4096", vars=cases(base("interconnect-h2d")),
        project={"benchmarks/base/interconnect-h2d/pytorch/config/cpu.yaml":
                 BASE_PROFILE.format(low=16777216, high=4096)}),
    Bad("base-vendor-infinite-warmup",
        f"{BASE_VENDOR}/main_memory-bandwidth-pytorch/config/cpux1x1.yaml: warmup",
        "finite number", vars=cases(base("main_memory-bandwidth")),
        project={f"{BASE_VENDOR}/main_memory-bandwidth-pytorch/config/cpux1x1.yaml":
                 "warmup: .inf\n"}),
    # -- inference configuration (seed 004) ----------------------------------------------------
    Bad("inference-no-validation-without-an-onnx-file",
        f"{VENDOR_CONFIG}: no_validation", "needs exist_onnx_path", vars=cases(INFERENCE),
        project={VENDOR_CONFIG: "compiler: onnxruntime\nfp16: false\nno_validation: true\n"}),
    Bad("inference-vendor-sets-a-parameter", f"{VENDOR_CONFIG}: image_size",
        "parameters.yaml: no vendor sets it", vars=cases(INFERENCE),
        project={VENDOR_CONFIG: "compiler: onnxruntime\nimage_size: 64\n"}),
    Bad("inference-vendor-repeats-a-value", f"{VENDOR_CONFIG}: batch_size",
        "equals the value it replaces", vars=cases(INFERENCE),
        project={VENDOR_CONFIG: "compiler: onnxruntime\nbatch_size: 60\n"}),
    Bad("inference-vendor-compiler-it-has-no-engine-for", f"{VENDOR_CONFIG}: compiler",
        "vendor cpu has no engine 'openvino'", vars=cases(INFERENCE),
        project={VENDOR_CONFIG: "compiler: openvino\n"}),
    Bad("inference-vendor-compiler-a-path-into-another-vendor", f"{VENDOR_CONFIG}: compiler",
        "vendor cpu has no engine '../../nvidia/inference_engine/tensorrt'", vars=cases(INFERENCE),
        project={VENDOR_CONFIG: "compiler: ../../nvidia/inference_engine/tensorrt\n"}),
    Bad("inference-vendor-flops-not-finite", f"{VENDOR_CONFIG}: flops",
        "not a positive number", vars=cases(INFERENCE),
        project={VENDOR_CONFIG: "compiler: onnxruntime\nflops: 1.0e+999\n"}),
    Bad("inference-vendor-new-key-not-finite", f"{VENDOR_CONFIG}: ort_threshold",
        "not a finite number", vars=cases(INFERENCE),
        project={VENDOR_CONFIG: "compiler: onnxruntime\nort_threshold: .nan\n"}),
    # The case's own profile sets batch_size: its file is named, not the vendor's.
    Bad("inference-profile-negative-batch-size", f"{INFERENCE_PROFILE}: batch_size",
        "greater than 0", vars=cases(INFERENCE),
        project={INFERENCE_PROFILE: (ROOT / INFERENCE_PROFILE).read_text().replace(
            "batch_size: 60", "batch_size: -60")}),
    # A local host: run checks the file on the controller, before any folder.
    Bad("inference-exist_onnx_path-missing", f"{VENDOR_CONFIG}: exist_onnx_path",
        "no such ONNX file", vars=cases({**INFERENCE, "data_dir": str(ROOT / "data/digits")}),
        hosts=group({"hosts": {"localhost": {"ansible_connection": "local"}}}),
        project={VENDOR_CONFIG: "compiler: onnxruntime\nexist_onnx_path: missing.onnx\n"}),
]


def _dump(value: Any) -> str:
    return value if isinstance(value, str) else yaml.safe_dump(value, sort_keys=False)


def write_inventory(base: Path, bad: Bad) -> Path:
    """The case's inventory folder under ``base``."""
    inventory = base / "inv"
    (inventory / "group_vars").mkdir(parents=True)
    if bad.hosts is not None:
        (inventory / "hosts.yml").write_text(_dump(bad.hosts))
    (inventory / "group_vars" / "all.yml").write_text(_dump(bad.vars))
    for name, text in bad.files.items():
        (inventory / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            (inventory / name).write_bytes(text)
        else:
            (inventory / name).write_text(text)
    return inventory


def scratch_copy(base: Path, edits: dict[str, str | bytes | None]) -> Path:
    """A copy of the parts of the checkout validation reads, with ``edits`` applied."""
    target = base / "project"
    for part in ("benchmarks", "vendors", "roles/flagperf"):
        shutil.copytree(ROOT / part, target / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "site.yml", target / "site.yml")
    for name, text in edits.items():
        path = target / name
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):
                path.write_bytes(text)
            else:
                path.write_text(text)
    return target


def environment(base: Path, project: Path | None = None) -> dict[str, str]:
    """This Python's tools first on PATH, Ansible logging to ``base/ansible.log``."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    env["ANSIBLE_LOG_PATH"] = str(base / "ansible.log")
    env["COLUMNS"] = "400"    # rich would fold long lines of the wrapper's report
    env.pop("FLAGPERF_PROJECT_DIR", None)
    if project is not None:
        env["FLAGPERF_PROJECT_DIR"] = str(project)
    return env


#: Corpus cases that run as a process of their own; the rest run in this one (``cli.main``).
SUBPROCESS = {"inventory-missing", "inventory-bad-yaml", "nnodes-above-the-hosts",
              "command-line-case-malformed", "vendor-bad-yaml", "inference-vendor-sets-a-parameter"}


def cli_args(base: Path, bad: Bad) -> list[str]:
    """The command's arguments after ``flagperf_ansible``, once its inventory (and project copy,
    where the case edits one) is written under ``base``."""
    write_inventory(base, bad)
    args = [bad.command, "-i", bad.inventory]
    if bad.command == "run":
        args += list(bad.args)
        if "--results-dir" not in bad.args:
            args += ["--results-dir", str(base / "results")]
    return args


def run_cli(base: Path, bad: Bad) -> subprocess.CompletedProcess:
    """``python -m flagperf_ansible`` with the case's arguments, from ``base``."""
    args = cli_args(base, bad)
    project = scratch_copy(base, bad.project) if bad.project else None
    return subprocess.run([sys.executable, "-m", "flagperf_ansible", *args], cwd=base,
                          env=environment(base, project), capture_output=True, text=True,
                          timeout=120)


def run_in_process(base: Path, bad: Bad) -> subprocess.CompletedProcess:
    """``cli.main`` with the case's arguments, from ``base`` and with its environment, its
    output captured; this process's folder and environment are restored afterwards."""
    from ansible.utils.display import Display

    from flagperf_ansible import cli

    Display()   # a singleton that patches the standard streams once: the real ones, not ours
    args = cli_args(base, bad)
    project = scratch_copy(base, bad.project) if bad.project else None
    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_dir = dict(os.environ), os.getcwd()
    try:
        os.environ.clear()
        os.environ.update(environment(base, project))
        os.chdir(base)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(args)
            except SystemExit as exit_:
                code = exit_.code
    finally:
        os.chdir(saved_dir)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_the_corpus_is_large_and_ids_are_unique():
    ids = [bad.id for bad in CORPUS]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Each selected corpus case's folder and CLI outcome: the ``SUBPROCESS`` ones a few at a
    time, each in its own process, then the others one after another in this process."""
    selected = [item.callspec.params["bad"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_bad_input_is_one_line_exit_2_and_nothing_runs"]

    corpus = tmp_path_factory.mktemp("corpus")

    def one(bad: Bad, how) -> tuple[str, tuple[Path, subprocess.CompletedProcess]]:
        base = corpus / bad.id
        base.mkdir()
        return bad.id, (base, how(base, bad))

    apart = [bad for bad in selected if bad.id in SUBPROCESS]
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = dict(pool.map(lambda bad: one(bad, run_cli), apart))
    found.update(one(bad, run_in_process) for bad in selected if bad.id not in SUBPROCESS)
    return found


def test_some_corpus_cases_run_as_processes_of_their_own():
    assert SUBPROCESS <= {bad.id for bad in CORPUS}


@pytest.mark.parametrize("bad", CORPUS, ids=lambda bad: bad.id)
def test_bad_input_is_one_line_exit_2_and_nothing_runs(outcomes, bad):
    base, done = outcomes[bad.id]
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    line = lines[0]
    assert line.startswith(f"flagperf-ansible: {bad.where}"), line
    assert bad.says in line, line
    # Nothing ran: no results folder, Ansible never started, no run announced.
    assert not (base / "results").exists()
    assert not (base / "my results").exists()
    assert not played(base)
    assert done.stdout == ""


def played(base: Path) -> bool:
    """Whether Ansible started a play (its banner is in the log)."""
    log = base / "ansible.log"
    return log.is_file() and "PLAY [" in log.read_text(errors="replace")


def test_the_observables_see_a_run_that_starts(ansible_playbook, tmp_path):
    """The same invocation on good input does start Ansible and write the results folder, so
    the corpus' "nothing ran" checks can fail. Here preflight's host play stops it: nothing
    listens at the host's address (a fault, not bad input)."""
    good = Bad("good", "", "", vars={**cases(SLEEP), "flagperf_root": str(tmp_path / "root"),
                                     "flagperf_workdir": str(tmp_path / "work")})
    done = run_cli(tmp_path, good)
    assert done.returncode == 1, done.stdout + done.stderr
    assert played(tmp_path)
    assert (tmp_path / "results").is_dir()
    assert "UNREACHABLE" in done.stdout or "unreachable" in done.stdout.lower(), done.stdout
    # Stopped before prepare: nothing shipped, no round started.
    assert not (tmp_path / "root").exists() and not (tmp_path / "work").exists()
    assert not list((tmp_path / "results").glob("run*/sleep-pytorch-cpux1x1/round1"))


PLAYBOOK_CASES = [bad for bad in CORPUS if bad.id in {
    "inventory-hosts-a-list", "ansible_host-read-as-an-ssh-option", "nnodes-above-the-hosts",
    "master_port-in-the-host-group-vars", "setting-typo-in-host_vars"}]


@pytest.mark.parametrize("bad", PLAYBOOK_CASES, ids=lambda bad: bad.id)
def test_site_yml_stops_in_the_controller_preflight_play(ansible_playbook, tmp_path, bad):
    write_inventory(tmp_path, bad)
    done = subprocess.run(
        ["ansible-playbook", str(ROOT / "site.yml"), "-i", "inv",
         "-e", f"flagperf_results_dir={tmp_path / 'results'}"],
        cwd=tmp_path, env=environment(tmp_path), capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    failed = [line for line in done.stdout.splitlines() if line.startswith("fatal: [localhost]")]
    assert len(failed) == 1, output
    assert f"{bad.where}" in failed[0] and bad.says in failed[0], failed[0]
    assert "Validate every input on the controller" in output
    for task in HOST_TASKS:
        assert task not in output, task
    assert not (tmp_path / "results").exists()
