"""The ``flagperf_*`` settings: their schema, defaults and descriptions, and the checks of values
that end up in paths, command lines and container options.

This is each setting's one declaration: ``python -m flagperf_ansible.config.settings`` writes
``roles/flagperf/defaults/main.yml`` and ``roles/flagperf/meta/argument_specs.yml`` from it
(``--check``: exit 1 where either is stale)."""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from flagperf_ansible.config.casespec import check_name, check_path, not_bool
from flagperf_ansible.config.errors import ConfigError, raise_first
from flagperf_ansible.config.slurm import check_options, check_time_limit

IMAGE_PATTERN = re.compile(r"[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_.-]{1,128})?")
#: Environment variable names (POSIX portable names).
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RUN_ID_PATTERN = re.compile(r"run[0-9]{14}")
#: One OpenSSH public key line: type, base64 key, optional comment.
PUBLIC_KEY_PATTERN = re.compile(r"(ssh|ecdsa|sk)-[A-Za-z0-9@.-]+ [A-Za-z0-9+/]+={0,3}( [^\r\n]*)?")
SIZE_PATTERN = re.compile(r"[0-9]+[bkmgBKMG]?")
#: An image pyxis or Apptainer runs: a file, or a URI (docker://registry#image:tag, oras://...).
CONTAINER_IMAGE_PATTERN = re.compile(r"[A-Za-z0-9_./+@][A-Za-z0-9_./+@:#-]{0,4095}")
#: A package index pip reads in image builds: http(s), a host, an optional port and path.
INDEX_URL_PATTERN = re.compile(r"(https?)://([^/@\s\\\"'`$;|&<>]+@)?[A-Za-z0-9.-]+(:[0-9]{1,5})?"
                               r"(/[A-Za-z0-9._~%/+=:-]*)?")

def templated(value: str) -> bool:
    """A Jinja expression Ansible renders later (the wrapper sees inventory files raw)."""
    return "{{" in value


def check_index_urls(value: str) -> str:
    """Validate pip index URLs (one, or several separated by spaces as pip's
    ``PIP_EXTRA_INDEX_URL`` takes them) for the image builds' ``PIP_INDEX_URL`` and
    ``PIP_EXTRA_INDEX_URL`` build arguments.

    Raises:
        ValueError: not an http(s) URL with a host, characters beyond a plain URL's, or
        credentials in it (build arguments are kept in the image's ``docker history``).
    """
    for url in value.split():
        match = INDEX_URL_PATTERN.fullmatch(url)
        if not match:
            raise ValueError(f"{url!r} is not an http:// or https:// package index URL")
        if match.group(2):
            raise ValueError(f"{url!r} holds credentials, which the image's docker history "
                             f"would keep: use an index that the build hosts may read without")
    return value


def check_env(value: Any) -> dict[str, str | int | float]:
    """Validate an environment mapping: portable variable names, one-line scalar values.

    Raises:
        ValueError: not a mapping, a bad name, or a value that is not a string or number or
        holds a line break or NUL.
    """
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of variable names to values, not "
                         f"{type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_NAME_PATTERN.fullmatch(key):
            raise ValueError(f"{key!r} is not an environment variable name")
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ValueError(f"variable {key}: {item!r} is not a string or a number")
        if isinstance(item, str) and any(c in item for c in "\n\r\0"):
            raise ValueError(f"variable {key}: {item!r} holds a line break or NUL")
    return value


Port = Annotated[int, BeforeValidator(not_bool), Field(ge=1024, le=65535)]
Seconds = Annotated[float, BeforeValidator(not_bool), Field(gt=0, le=3600)]


class Settings(BaseModel):
    """The ``flagperf_*`` settings: the one declaration of each (type, checks, default,
    description). ``roles/flagperf/defaults/main.yml`` and ``meta/argument_specs.yml`` are
    generated from it (``python -m flagperf_ansible.config.settings``)."""

    model_config = ConfigDict(extra="forbid")

    flagperf_vendor: str = Field(
        "cpu", description="Vendor folder under vendors/ (container image, monitor plugin, "
                           "config overrides).")
    flagperf_container_runtime: Literal["none", "docker", "pyxis", "apptainer"] = Field(
        "none", description="How a round's processes run on each host: `none` runs them in "
                            "flagperf_python on the host, `docker` in one container per host from "
                            "the vendor's image; with flagperf_backend slurm also `pyxis` (srun "
                            "--container-image) or `apptainer` (apptainer exec), in the image "
                            "flagperf_container_images names.")
    flagperf_container_images: dict[str, str] = Field(
        {}, description="Runtime pyxis or apptainer: each framework's image, which the site "
                        "provides (pyxis: an enroot URI such as docker://registry#image:tag or a "
                        "squashfs file; apptainer: a .sif file or a docker:// URI), by framework "
                        "name (pytorch: /shared/images/flagperf-cpu-pytorch.sif).")
    flagperf_backend: Literal["ssh", "slurm"] = Field(
        "ssh", description="How a round reaches its nodes: `ssh` runs each node's steps over ssh "
                           "on the first nnodes hosts of flagperf_hosts; `slurm` submits each "
                           "round as one Slurm job of nnodes nodes, one task per node, from the "
                           "one host in flagperf_hosts (a login node), whose flagperf_root and "
                           "flagperf_workdir the nodes share.")
    flagperf_slurm_partition: str = Field(
        "", description="Backend slurm: the partition of the rounds' jobs (\"\": the cluster's "
                        "default).")
    flagperf_slurm_account: str = Field(
        "", description="Backend slurm: the account the jobs are charged to (\"\": the user's "
                        "default).")
    flagperf_slurm_qos: str = Field(
        "", description="Backend slurm: the jobs' quality of service (\"\": the default).")
    flagperf_slurm_reservation: str = Field(
        "", description="Backend slurm: the reservation the jobs run in (\"\": none).")
    flagperf_slurm_time_limit: str = Field(
        "", description="Backend slurm: the jobs' time limit in Slurm's form (minutes, "
                        "HH:MM:SS, D-HH:MM); \"\": each case's timeout plus 10 minutes.")
    flagperf_slurm_exclusive: bool = Field(
        True, description="Backend slurm: the jobs take their nodes whole (sbatch --exclusive), "
                          "so that no other job shares them while a round is measured.")
    flagperf_slurm_options: list[str] = Field(
        [], description="Backend slurm: more sbatch options, one each (--constraint=a100, "
                        "--gres=gpu:8); the options a round sets itself (nodes, tasks, job "
                        "name, output, time, partition, ...) are refused.")
    flagperf_results_dir: str = Field(
        "results", description="Controller folder for results; relative paths are under the "
                               "project checkout.")
    flagperf_clear_caches: bool = Field(
        True, description="Drop the page cache before each round (needs root on the host; "
                          "skipped with a note otherwise).")
    flagperf_master_port: Port = Field(
        29500, description="Rendezvous port on noderank 0 for multi-node rounds (1024 to 65535).")
    # validate_default: a settings dict without cases fails, as when the key was required.
    flagperf_cases: list[Any] = Field(
        [], min_length=1, validate_default=True,
        description="Case specs to run (at least one): mappings (model, framework, hardware, "
                    "nnodes, nproc_per_node, repeat, data_dir, timeout) or FlagPerf keys "
                    "'model:framework:hardware:nnodes:nproc:repeat'.")
    flagperf_root: str = Field(
        "/opt/flagperf",
        description="Where deploy puts benchmarks/ and vendors/ on the hosts (absolute). The "
                    "default suits a root ssh user; a non-root one sets a folder under its home "
                    "(inventories/lab: /home/bench/flagperf). Preflight stops the run, one line "
                    "per host, where the ssh user cannot make or write it "
                    "(src/flagperf_host/folders_check.py).")
    flagperf_workdir: str = Field(
        "/var/tmp/flagperf",
        description="Host folder (absolute) for round outputs and monitor pid files, before they "
                    "are fetched, image build contexts and, runtime none, the frameworks' "
                    "environments (envs/). The ssh user must be able to write it; preflight "
                    "checks it like flagperf_root.")
    flagperf_python: str = Field(
        "python3",
        description="Python on the hosts that runs cases (runtime none), monitors and, runtime "
                    "docker, the docker_container module run that starts a node's container "
                    "(what Ansible's Docker modules need: requests).")
    flagperf_monitor_interval: Seconds = Field(
        1.0, description="Seconds between monitor samples (over 0, at most 3600).")
    flagperf_wait_slice: Annotated[float, BeforeValidator(not_bool),
                                   Field(ge=0.01, le=3600)] = Field(
        10, description="Seconds one wait exchange with a host lasts (0.01 to 3600; the round's "
                        "wait is a flat loop of them, so a round may last a day at any slice): a "
                        "node that failed ends the round on every host within about this long.")
    flagperf_env: dict[str, Any] = Field(
        {}, description="Extra environment of the case's processes (e.g. NCCL_DEBUG, "
                        "GLOO_SOCKET_IFNAME): variable names to one-line strings or numbers.")
    flagperf_known_hosts_file: str = Field(
        "~/.ssh/known_hosts",
        description="The controller's known_hosts file (match ssh's UserKnownHostsFile): it pins "
                    "the hosts' keys (a pinned key that differs from the host's fails the run) "
                    "and receives unknown hosts' keys.")
    flagperf_ssh_strict_host_keys: bool = Field(
        False, description="Trust only host keys already pinned in flagperf_known_hosts_file: an "
                           "unknown host fails instead of having its key added (a pinned key that "
                           "differs fails either way).")
    flagperf_ssh_public_key: str = Field(
        "", description="Controller public key (one OpenSSH public key line) to authorize on each "
                        "host (\"\" to leave authorized_keys alone).")
    flagperf_ssh_mesh: bool = Field(
        False, description="Host-to-host ssh: let the hosts reach each other over ssh.")
    flagperf_base_image: str = Field(
        "flagperf-base:bookworm",
        description="Base image given to the vendor Dockerfiles (runtime docker; made locally, "
                    "never pulled).")
    flagperf_image_wheels: list[str] = Field(
        [], description="Wheel files on the hosts copied into the vendor image builds (runtime "
                        "docker).")
    flagperf_pip_ca_bundle: str = Field(
        "", description="CA bundle on the hosts that pip trusts in the vendor image builds "
                        "(runtime docker) and, runtime none, in the frameworks' environments "
                        "(roles/framework_env); \"\" for none.")
    flagperf_pip_index_url: str = Field(
        "", description="Package index the image builds' pip reads (\"\" for PyPI; one http(s) "
                        "URL, no credentials): given to the Dockerfiles as the PIP_INDEX_URL "
                        "build argument (build only, not the image's environment; not part of the image "
                        "tag), and to the pip that makes the frameworks' environments (runtime "
                        "none).")
    flagperf_pip_extra_index_url: str = Field(
        "", description="More package indexes beside flagperf_pip_index_url (http(s) URLs "
                        "separated by spaces, no credentials): given to the Dockerfiles as the "
                        "PIP_EXTRA_INDEX_URL build argument (build only, not the image's "
                        "environment; not part of the image tag), and to the pip that makes the "
                        "frameworks' environments (runtime none).")
    flagperf_mask_hosts: bool = Field(
        False, description="Replace host names and addresses with host<i> (the host's index in "
                           "flagperf_hosts) in every document written for sharing (run.json, "
                           "round.json, summary.*, sys_info.json, node folder names); raw logs "
                           "are kept as the cases wrote them.")
    flagperf_keep_workdir: bool = Field(
        False, description="Keep each round's folder on the hosts (under flagperf_workdir) after "
                           "its files are fetched; by default it is removed once they are on the "
                           "controller.")
    flagperf_run_id: str = Field(
        "", description="Run id (run<YYYYmmddHHMMSS>), set by the wrapper; generated when empty.")
    flagperf_select: str = Field(
        "", description="The one round to run (<case_id>/round<k>), set by the wrapper; all "
                        "rounds when empty.")

    _vendor = field_validator("flagperf_vendor")(check_name)

    @field_validator("flagperf_root", "flagperf_workdir", "flagperf_python", "flagperf_results_dir")
    @classmethod
    def _paths(cls, value: str) -> str:
        return value if templated(value) else check_path(value)

    @field_validator("flagperf_slurm_partition", "flagperf_slurm_account", "flagperf_slurm_qos",
                     "flagperf_slurm_reservation")
    @classmethod
    def _slurm_names(cls, value: str) -> str:
        return value if not value or templated(value) else check_name(value)

    @field_validator("flagperf_slurm_time_limit")
    @classmethod
    def _time_limit(cls, value: str) -> str:
        return value if templated(value) else check_time_limit(value)

    @field_validator("flagperf_slurm_options")
    @classmethod
    def _sbatch_options(cls, value: list[str]) -> list[str]:
        check_options([v for v in value if not (isinstance(v, str) and templated(v))])
        return value

    @field_validator("flagperf_container_images")
    @classmethod
    def _container_images(cls, value: dict[str, str]) -> dict[str, str]:
        for framework, image in value.items():
            check_name(framework)
            if not templated(image) and (not CONTAINER_IMAGE_PATTERN.fullmatch(image)
                                         or ".." in image.split("/")):
                raise ValueError(f"{framework}: {image!r} is not an image file or URI "
                                 "(/shared/images/x.sif, docker://registry#image:tag)")
        return value

    @field_validator("flagperf_image_wheels")
    @classmethod
    def _wheels(cls, value: list[str]) -> list[str]:
        return [v if templated(v) else check_path(v) for v in value]

    @field_validator("flagperf_env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        return check_env(value)

    @field_validator("flagperf_known_hosts_file")
    @classmethod
    def _known_hosts(cls, value: str) -> str:
        return value if templated(value) else check_path(value, home=True)

    @field_validator("flagperf_pip_ca_bundle")
    @classmethod
    def _ca_bundle(cls, value: str) -> str:
        return value if not value or templated(value) else check_path(value)

    @field_validator("flagperf_pip_index_url")
    @classmethod
    def _index_url(cls, value: str) -> str:
        if templated(value):
            return value
        if len(value.split()) > 1:
            raise ValueError("one URL only (more indexes go in flagperf_pip_extra_index_url)")
        return check_index_urls(value)

    @field_validator("flagperf_pip_extra_index_url")
    @classmethod
    def _extra_index_urls(cls, value: str) -> str:
        return value if templated(value) else check_index_urls(value)

    @field_validator("flagperf_ssh_public_key")
    @classmethod
    def _public_key(cls, value: str) -> str:
        if value and not templated(value) and not PUBLIC_KEY_PATTERN.fullmatch(value.strip()):
            raise ValueError("not one OpenSSH public key line ('ssh-ed25519 AAAA... comment')")
        return value

    @field_validator("flagperf_base_image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not templated(value) and not IMAGE_PATTERN.fullmatch(value):
            raise ValueError(f"{value!r} is not an image reference")
        return value

    @field_validator("flagperf_workdir", "flagperf_root")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not templated(value) and not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path on the hosts")
        return value

    @field_validator("flagperf_run_id")
    @classmethod
    def _run_id(cls, value: str) -> str:
        if value and not RUN_ID_PATTERN.fullmatch(value):
            raise ValueError(f"{value!r} is not a run id 'run<YYYYmmddHHMMSS>'")
        return value


def check_settings(settings: Mapping[str, Any], origins: Mapping[str, str]) -> Settings:
    """Check the ``flagperf_*`` settings alone (names, types, safe values), without planning.

    Args:
        settings: every ``flagperf_*`` variable with its value.
        origins: the file each setting came from ("extra vars" where none is known).

    Raises:
        ConfigError: an unknown setting or a bad value, naming its file and key.
    """
    def origin(key: str) -> str:
        return origins.get(key, "extra vars")

    unknown = sorted(k for k in settings if k not in Settings.model_fields)
    if unknown:
        raise ConfigError("unknown setting (a typo?)", origin(unknown[0]), unknown[0])
    with raise_first(origin):
        checked = Settings.model_validate(dict(settings))
    known_hosts = checked.flagperf_known_hosts_file
    if checked.flagperf_ssh_strict_host_keys and not templated(known_hosts) \
            and not Path(known_hosts).expanduser().is_file():
        # Strict means only pinned keys are trusted: without the file every host is refused.
        key = ("flagperf_known_hosts_file"
               if origins.get("flagperf_known_hosts_file") not in (None, DEFAULTS_FILE)
               else "flagperf_ssh_strict_host_keys")
        raise ConfigError(f"flagperf_ssh_strict_host_keys is true but the known_hosts file "
                          f"{known_hosts} does not exist on the controller (pin the hosts' keys "
                          f"first: ssh-keyscan)", origin(key), key)
    return checked


DEFAULTS_FILE = "roles/flagperf/defaults/main.yml"
ARGUMENT_SPECS_FILE = "roles/flagperf/meta/argument_specs.yml"
GENERATED = ("# Generated from src/flagperf_ansible/config/settings.py by "
             "`python -m flagperf_ansible.config.settings`:\n# edit there, not here.")
WIDTH = 99
_TYPES = {str: "str", int: "int", float: "float", bool: "bool", list: "list", dict: "dict"}


def defaults() -> dict[str, Any]:
    """Every setting's default as plain data, in declaration order (fresh copies)."""
    return {name: copy.deepcopy(field.default) for name, field in Settings.model_fields.items()}


def _option_type(annotation: Any) -> dict[str, Any]:
    """Ansible's argument spec type of a field's annotation: ``Literal`` is ``str`` with
    ``choices``, a list's ``elements`` is its item type (``raw`` for anything).

    Raises:
        TypeError: a type the argument spec has no word for.
    """
    if get_origin(annotation) is Literal:
        choices = list(get_args(annotation))
        if not all(isinstance(c, str) for c in choices):
            raise TypeError(f"{annotation}: only string choices are supported")
        return {"type": "str", "choices": choices}
    kind = _TYPES.get(get_origin(annotation) or annotation)
    if kind is None:
        raise TypeError(f"{annotation} has no argument spec type")
    if kind == "list":
        (item,) = get_args(annotation) or (Any,)
        return {"type": "list", "elements": _TYPES.get(item, "raw")}
    return {"type": kind}


def argument_spec() -> dict[str, Any]:
    """The flagperf role's ``meta/argument_specs.yml`` document: each setting's type (with
    ``elements``, ``choices``), default and description, in declaration order."""
    options = {name: {**_option_type(field.annotation), "default": copy.deepcopy(field.default),
                      "description": field.description}
               for name, field in Settings.model_fields.items()}
    return {"argument_specs": {"main": {
        "short_description": "Shared flagperf-ansible settings",
        "description": "Defaults-only role included first in every play; validation lives in "
                       "the flagperf_ansible package.",
        "options": options}}}


def _plain(text: str, flow: bool = False) -> bool:
    """Whether ``text`` loads back as itself written as a plain (unquoted) YAML scalar."""
    import yaml

    if not text or text != text.strip() or "\n" in text:
        return False
    try:
        if flow:
            return yaml.safe_load(f"[{text}]") == [text]
        return yaml.safe_load(f"k: {text}") == {"k": text}
    except yaml.YAMLError:
        return False


def _yaml(value: Any, flow: bool = False) -> str:
    """``value`` as one line of YAML that loads back equal: plain strings where they stay
    strings (``~/.ssh/known_hosts``, ``none``), JSON (a YAML subset) otherwise."""
    if isinstance(value, str):
        return value if _plain(value, flow) else json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v, True) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"{_yaml(k, True)}: {_yaml(v, True)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    return json.dumps(value)


def _wrap(text: str, width: int) -> list[str]:
    # No breaks at hyphens: a folded YAML scalar joins its lines with a space.
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)


def defaults_yaml() -> str:
    """The text of ``roles/flagperf/defaults/main.yml``: each default under its description."""
    lines = ["---", GENERATED,
             "# Shared settings of every flagperf-ansible play; set them in inventory group_vars.",
             ""]
    for name, field in Settings.model_fields.items():
        lines += [f"# {line}" for line in _wrap(field.description, WIDTH - 2)]
        lines.append(f"{name}: {_yaml(field.default)}")
    return "\n".join(lines) + "\n"


def _mapping_lines(mapping: dict[str, Any], indent: str) -> list[str]:
    lines = []
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            lines += [f"{indent}{key}:", *_mapping_lines(value, indent + "  ")]
        elif key.endswith("description") and (len(f"{indent}{key}: {value}") > WIDTH
                                                or not _plain(value)):
            lines += [f"{indent}{key}: >-",
                      *(f"{indent}  {line}" for line in _wrap(value, WIDTH - len(indent) - 2))]
        else:
            lines.append(f"{indent}{key}: {_yaml(value)}")
    return lines


def argument_specs_yaml() -> str:
    """The text of ``roles/flagperf/meta/argument_specs.yml`` (see :func:`argument_spec`)."""
    return "\n".join(["---", GENERATED, *_mapping_lines(argument_spec(), "")]) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the flagperf role's defaults/main.yml and meta/argument_specs.yml under the
    project root; with ``--check``, write nothing and return 1 if either differs."""
    parser = argparse.ArgumentParser(prog="python -m flagperf_ansible.config.settings",
                                     description=main.__doc__)
    parser.add_argument("--check", action="store_true",
                        help="exit 1, naming each stale file, instead of writing")
    check = parser.parse_args(argv).check
    root = Path(__file__).resolve().parents[3]  # src/flagperf_ansible/config/ -> the checkout
    stale = False
    for relative, text in ((DEFAULTS_FILE, defaults_yaml()),
                           (ARGUMENT_SPECS_FILE, argument_specs_yaml())):
        path = root / relative
        if path.is_file() and path.read_text() == text:
            continue
        if check:
            stale = True
            print(f"{relative} is stale: run python -m flagperf_ansible.config.settings", file=sys.stderr)
        else:
            path.write_text(text)
            print(f"wrote {relative}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
