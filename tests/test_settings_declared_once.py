"""Each ``flagperf_*`` setting is declared once, in ``flagperf_ansible.config.settings.Settings``: the
flagperf role's defaults/main.yml and meta/argument_specs.yml are generated from it, and Ansible
accepts the generated argument spec."""

import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.config.settings import (ARGUMENT_SPECS_FILE, DEFAULTS_FILE, Settings,
                                       argument_specs_yaml, check_settings, defaults,
                                       defaults_yaml)

ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "stale: run `python -m flagperf_ansible.config.settings`"


def _committed_defaults() -> dict:
    return yaml.safe_load((ROOT / DEFAULTS_FILE).read_text())


def _committed_options() -> dict:
    specs = yaml.safe_load((ROOT / ARGUMENT_SPECS_FILE).read_text())
    return specs["argument_specs"]["main"]["options"]


@pytest.mark.parametrize("relative, generate", [(DEFAULTS_FILE, defaults_yaml),
                                                (ARGUMENT_SPECS_FILE, argument_specs_yaml)])
def test_committed_files_are_the_generated_text(relative, generate):
    assert (ROOT / relative).read_text() == generate(), f"{relative} is {REGENERATE}"


def test_names_and_order_agree():
    names = list(Settings.model_fields)
    assert list(_committed_defaults()) == names
    assert list(_committed_options()) == names


def _spec_type(annotation) -> dict:
    """What the argument spec must say of a model annotation (independent of the generator)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return {"type": "str", "choices": list(typing.get_args(annotation))}
    if origin is list:
        (item,) = typing.get_args(annotation)
        return {"type": "list", "elements": "str" if item is str else "raw"}
    return {"type": {str: "str", int: "int", float: "float", bool: "bool", dict: "dict"}[
        origin or annotation]}


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_each_setting_agrees_key_by_key(name):
    field = Settings.model_fields[name]
    committed_default = _committed_defaults()[name]
    option = _committed_options()[name]
    assert committed_default == option["default"] == field.default == defaults()[name]
    assert type(committed_default) is type(field.default), name  # 1.0 stays a float, "" a str
    assert {k: v for k, v in option.items() if k in ("type", "elements", "choices")} \
        == _spec_type(field.annotation)
    assert field.description and option["description"] == field.description
    assert "required" not in option


def test_known_hosts_default_is_a_path_not_null():
    assert _committed_defaults()["flagperf_known_hosts_file"] == "~/.ssh/known_hosts"


def test_defaults_are_fresh_copies():
    first = defaults()
    first["flagperf_cases"].append("x")
    first["flagperf_env"]["A"] = "1"
    assert defaults()["flagperf_cases"] == [] and defaults()["flagperf_env"] == {}
    assert Settings.model_fields["flagperf_cases"].default == []


def test_defaults_with_a_case_pass_and_without_fail():
    parsed = check_settings({**defaults(), "flagperf_cases": ["sleep:pytorch:cpu:1:1:1"]}, {})
    assert parsed.flagperf_master_port == 29500
    with pytest.raises(ConfigError, match="flagperf_cases: List should have at least 1 item"):
        check_settings({**defaults(), "flagperf_cases": []}, {})
    # A settings dict that lacks the key fails as well: the [] default is validated.
    without = {k: v for k, v in defaults().items() if k != "flagperf_cases"}
    with pytest.raises(ConfigError, match="flagperf_cases"):
        check_settings(without, {})


def test_check_mode_of_the_generator_passes_on_the_checkout():
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible.config.settings", "--check"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr


PLAYBOOK = """\
- name: Apply the flagperf role
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: flagperf
  tasks:
    - name: Show defaults
      ansible.builtin.debug:
        msg: "port={{ flagperf_master_port }} known_hosts={{ flagperf_known_hosts_file }}"
"""


def _play(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")  # no user or system config
    env = {**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
           "ANSIBLE_NOCOLOR": "1"}
    playbook = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run([str(playbook), "-i", "localhost,", "play.yml",
                           "-e", f"ansible_python_interpreter={sys.executable}", *extra],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_ansible_accepts_the_argument_spec(ansible_playbook, tmp_path):
    done = _play(tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Validating arguments against arg spec 'main'" in done.stdout
    assert "port=29500 known_hosts=~/.ssh/known_hosts" in done.stdout


def test_ansible_rejects_a_wrong_type(ansible_playbook, tmp_path):
    done = _play(tmp_path, "-e", "flagperf_master_port=notanumber")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-4000:]
    assert "Validation of arguments failed" in output, output[-4000:]
    assert "argument 'flagperf_master_port' is of type str and we were unable to convert to int" \
        in output, output[-4000:]
