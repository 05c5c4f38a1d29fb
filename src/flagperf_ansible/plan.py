"""Validate every setting and case spec, then lay out the run: which rounds, on which hosts.

This is the one home of validation. The wrapper calls it before starting Ansible; the
``flagperf_plan`` filter calls it again inside the playbooks, so ``site.yml`` run on its own is
checked the same way. Both run on the controller before any host is touched.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, field_validator

from flagperf_ansible.cases import effective_config, load_case, read_yaml
from flagperf_ansible.casespec import (CaseSpec, check_name, check_path, not_bool,
                                       parse_case_spec)
from flagperf_ansible.errors import ConfigError, raise_first
from flagperf_ansible.launch import image_tag
from flagperf_ansible.mfu import load_peaks, mfu_basis

IMAGE_PATTERN = re.compile(r"[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_.-]{1,128})?")
#: Environment variable names (POSIX portable names).
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RUN_ID_PATTERN = re.compile(r"run[0-9]{14}")
#: One OpenSSH public key line: type, base64 key, optional comment.
PUBLIC_KEY_PATTERN = re.compile(r"(ssh|ecdsa|sk)-[A-Za-z0-9@.-]+ [A-Za-z0-9+/]+={0,3}( [^\r\n]*)?")
#: A device passed into a container: host path, optional container path and permissions.
DEVICE_PATTERN = re.compile(r"/dev/[A-Za-z0-9_./-]+(:/dev/[A-Za-z0-9_./-]+)?(:[rwm]{1,3})?")
#: Docker's size notation (shm_size): a number with an optional unit.
SIZE_PATTERN = re.compile(r"[0-9]+[bkmgBKMG]?")


def _templated(value: str) -> bool:
    """A Jinja expression Ansible renders later (the wrapper sees inventory files raw)."""
    return "{{" in value


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


class ContainerOptions(BaseModel):
    """``vendors/<vendor>/vendor.yml: container``: how roles/container runs a vendor's image.

    Not privileged unless the vendor says so (``privileged: true``, a real boolean).
    """

    model_config = ConfigDict(extra="forbid")

    privileged: StrictBool = False
    #: Host devices passed in (``/dev/...:/dev/...[:rwm]``).
    devices: list[str] = []
    #: ``docker run --gpus``-style requests (community.docker ``device_requests``).
    device_requests: list[dict[str, Any]] = []
    #: Reserved: extra device options of a vendor's own launcher.
    device_options: list[str] = []
    #: The variable that selects the visible accelerators ("" for none).
    visible_devices_env: str = ""
    shm_size: str = ""
    ipc_mode: str = ""
    network_mode: str = "host"
    env: dict[str, Any] = {}

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: list[str]) -> list[str]:
        for item in value:
            if not DEVICE_PATTERN.fullmatch(item) or ".." in item:
                raise ValueError(f"{item!r} is not a device mapping '/dev/X[:/dev/Y][:rwm]'")
        return value

    @field_validator("visible_devices_env")
    @classmethod
    def _visible(cls, value: str) -> str:
        if value and not ENV_NAME_PATTERN.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, value: str) -> str:
        if value and not SIZE_PATTERN.fullmatch(str(value)):
            raise ValueError(f"{value!r} is not a size (e.g. 1g, 512m)")
        return value

    @field_validator("ipc_mode", "network_mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        return check_name(value) if value else value

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        return check_env(value)


def load_vendor(project: Path, vendor: str) -> dict[str, Any]:
    """Read and check ``vendors/<vendor>/vendor.yml``.

    Returns:
        ``{"hardware": [...], "container": {...}}``: the hardware names the vendor declares
        and its container options (only the keys it set).

    Raises:
        ConfigError: naming vendor.yml and the key that is malformed.
    """
    path = project / "vendors" / vendor / "vendor.yml"
    shown = str(path.relative_to(project))
    data = read_yaml(path, project) or {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping (name, hardware, container, ...)", shown)
    hardware = data.get("hardware", [])
    if not isinstance(hardware, list):
        raise ConfigError("expected a list of hardware names", shown, "hardware")
    for index, name in enumerate(hardware):
        try:
            check_name(name)
        except ValueError as err:
            raise ConfigError(str(err), shown, f"hardware[{index}]") from None
    container = data.get("container") or {}
    with raise_first(shown, "container"):
        options = ContainerOptions.model_validate(container)
    return {"hardware": [str(h) for h in hardware],
            "container": options.model_dump(exclude_unset=True)}


class Settings(BaseModel):
    """The ``flagperf_*`` settings; defaults live in ``roles/flagperf/defaults/main.yml``."""

    model_config = ConfigDict(extra="forbid")

    flagperf_vendor: str
    flagperf_container_runtime: Literal["none", "docker"]
    flagperf_results_dir: str
    flagperf_clear_caches: bool
    flagperf_master_port: Port
    flagperf_cases: list[Any] = Field(min_length=1)
    flagperf_root: str
    flagperf_workdir: str
    flagperf_python: str
    flagperf_monitor_interval: Seconds
    flagperf_wait_slice: Annotated[float, BeforeValidator(not_bool), Field(ge=0.01, le=3600)] = 10
    flagperf_env: dict[str, Any] = {}
    flagperf_known_hosts_file: str
    flagperf_ssh_public_key: str
    flagperf_ssh_mesh: bool
    flagperf_base_image: str
    flagperf_image_wheels: list[str]
    flagperf_pip_ca_bundle: str
    flagperf_mask_hosts: bool = False
    flagperf_keep_workdir: bool = False
    flagperf_run_id: str = ""
    flagperf_select: str = ""

    _vendor = field_validator("flagperf_vendor")(check_name)

    @field_validator("flagperf_root", "flagperf_workdir", "flagperf_python", "flagperf_results_dir")
    @classmethod
    def _paths(cls, value: str) -> str:
        return value if _templated(value) else check_path(value)

    @field_validator("flagperf_image_wheels")
    @classmethod
    def _wheels(cls, value: list[str]) -> list[str]:
        return [v if _templated(v) else check_path(v) for v in value]

    @field_validator("flagperf_env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        return check_env(value)

    @field_validator("flagperf_known_hosts_file")
    @classmethod
    def _known_hosts(cls, value: str) -> str:
        return value if _templated(value) else check_path(value, home=True)

    @field_validator("flagperf_pip_ca_bundle")
    @classmethod
    def _ca_bundle(cls, value: str) -> str:
        return value if not value or _templated(value) else check_path(value)

    @field_validator("flagperf_ssh_public_key")
    @classmethod
    def _public_key(cls, value: str) -> str:
        if value and not _templated(value) and not PUBLIC_KEY_PATTERN.fullmatch(value.strip()):
            raise ValueError("not one OpenSSH public key line ('ssh-ed25519 AAAA... comment')")
        return value

    @field_validator("flagperf_base_image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not _templated(value) and not IMAGE_PATTERN.fullmatch(value):
            raise ValueError(f"{value!r} is not an image reference")
        return value

    @field_validator("flagperf_workdir", "flagperf_root")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not _templated(value) and not value.startswith("/"):
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
        return Settings.model_validate(dict(settings))


def _host_path(root: str, path: str) -> str:
    """A host path: relative paths are under ``flagperf_root``."""
    if not path or path.startswith("/") or _templated(root):
        return path
    return f"{root.rstrip('/')}/{path}"


def results_root(results_dir: str, project: Path) -> Path:
    """The controller folder of the runs' results: ``flagperf_results_dir``, under the project
    checkout when relative."""
    path = Path(results_dir)
    if not path.is_absolute() and not _templated(results_dir):
        path = Path(project) / path
    return path


def round_key(case_id: str, round_no: int) -> str:
    """``<case_id>/round<k>``: a round's id, and its folder under the run dir."""
    return f"{case_id}/round{round_no}"


def build_plan(
    settings: Mapping[str, Any],
    origins: Mapping[str, str],
    hosts: list[str],
    addresses: Mapping[str, str],
    project: Path,
) -> dict[str, Any]:
    """Check everything and return the run's plan.

    Args:
        settings: every ``flagperf_*`` variable with its value.
        origins: the file each setting came from, for error messages.
        hosts: the benchmark hosts in noderank order.
        addresses: how the hosts reach each other (``ansible_host``) by host name.
        project: the checkout holding ``benchmarks/`` and ``vendors/``.

    Returns:
        ``{"vendor", "runtime", "results_dir", "cases": [...], "rounds": [...]}`` where each
        round is ``{"key", "case_id", "round", "model", "framework", "hosts", "master_addr",
        "nnodes", "nproc_per_node", "launcher", "entry", "timeout", "data_dir", "config",
        "overrides", "metric", "diagnostic", "large_artifacts", "mfu_basis"}``; ``"hosts"`` lists
        ``{host, address, label}`` per benchmark host and ``"mask_hosts"`` says whether
        documents show ``label`` (``host<i>``) instead of names and addresses.

    Raises:
        ConfigError: the first problem found, naming its file and key.
    """
    def origin(key: str) -> str:
        return origins.get(key, "extra vars")

    parsed = check_settings(settings, origins)

    vendor_dir = project / "vendors" / parsed.flagperf_vendor
    if not (vendor_dir / "vendor.yml").is_file():
        known = ", ".join(sorted(p.parent.name for p in project.glob("vendors/*/vendor.yml")))
        raise ConfigError(f"no vendor {parsed.flagperf_vendor!r} (known: {known})",
                          origin("flagperf_vendor"), "flagperf_vendor")

    vendor_def = load_vendor(project, parsed.flagperf_vendor)
    peaks = load_peaks(project, parsed.flagperf_vendor)
    source = origin("flagperf_cases")
    cases: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(parsed.flagperf_cases):
        key = f"flagperf_cases[{index}]"
        spec = parse_case_spec(item, source, key)
        if vendor_def["hardware"] and spec.hardware not in vendor_def["hardware"]:
            raise ConfigError(
                f"vendor {parsed.flagperf_vendor} declares no hardware {spec.hardware!r} "
                f"(vendors/{parsed.flagperf_vendor}/vendor.yml: {', '.join(vendor_def['hardware'])})",
                source, f"{key}.hardware")
        try:
            case = load_case(project, spec.model, spec.framework)
            config, overrides = effective_config(project, case, spec, parsed.flagperf_vendor)
        except ConfigError as err:
            if err.source:
                raise
            raise ConfigError(err.message, source, key) from None
        if parsed.flagperf_container_runtime == "docker":
            try:
                image_tag(project, parsed.flagperf_vendor, spec.framework, {})
            except FileNotFoundError:
                raise ConfigError(
                    f"vendor {parsed.flagperf_vendor} has no image for framework {spec.framework} "
                    f"(vendors/{parsed.flagperf_vendor}/docker_image/{spec.framework}/Dockerfile)",
                    source, key) from None
        if spec.case_id in seen:
            raise ConfigError(f"case {spec.case_id} is listed twice", source, key)
        seen.add(spec.case_id)
        if spec.nnodes > len(hosts):
            raise ConfigError(
                f"nnodes {spec.nnodes} is more than the {len(hosts)} host(s) in flagperf_hosts",
                source, f"{key}.nnodes")
        if case.needs_data and not spec.data_dir:
            raise ConfigError("this case needs data_dir", source, f"{key}.data_dir")
        round_hosts = hosts[: spec.nnodes]
        cases.append({"case_id": spec.case_id, "spec": spec.model_dump(), "metric": case.metric,
                      "diagnostic": case.diagnostic, "description": case.description})
        for number in range(1, spec.repeat + 1):
            rounds.append({
                "key": round_key(spec.case_id, number),
                "case_id": spec.case_id,
                "round": number,
                "model": spec.model,
                "framework": spec.framework,
                "hosts": round_hosts,
                "master_addr": str(addresses.get(round_hosts[0], round_hosts[0])),
                "nnodes": spec.nnodes,
                "nproc_per_node": spec.nproc_per_node,
                "launcher": case.launcher,
                "entry": f"benchmarks/{spec.model}/{spec.framework}/{case.entry}",
                "timeout": spec.timeout or case.timeout,
                "data_dir": _host_path(parsed.flagperf_root, spec.data_dir),
                "config": config,
                "overrides": overrides,
                "metric": case.metric,
                "diagnostic": case.diagnostic,
                "large_artifacts": list(case.large_artifacts),
                "mfu_basis": mfu_basis(case.flops, case.precision_peak, config, peaks,
                                       spec.hardware, spec.nnodes * spec.nproc_per_node),
            })
    if parsed.flagperf_select and parsed.flagperf_select not in {r["key"] for r in rounds}:
        raise ConfigError(f"no round {parsed.flagperf_select!r} in this plan",
                          origin("flagperf_select"), "flagperf_select")

    results_dir = results_root(parsed.flagperf_results_dir, project)
    images = {}
    if parsed.flagperf_container_runtime == "docker":
        inputs = {"base_image": parsed.flagperf_base_image,
                  "wheels": sorted(Path(w).name for w in parsed.flagperf_image_wheels)}
        for framework in sorted({c["spec"]["framework"] for c in cases}):
            name = f"flagperf-{parsed.flagperf_vendor}-{framework}"
            images[framework] = {
                "name": name, "framework": framework,
                "tag": image_tag(project, parsed.flagperf_vendor, framework, inputs)}
    return {
        "vendor": parsed.flagperf_vendor,
        "container": vendor_def["container"],
        "images": images,
        "runtime": parsed.flagperf_container_runtime,
        "results_dir": str(results_dir),
        "cases": cases,
        "rounds": rounds,
        "hosts": [{"host": h, "address": str(addresses.get(h, h)), "label": f"host{i}"}
                  for i, h in enumerate(hosts)],
        "mask_hosts": parsed.flagperf_mask_hosts,
    }


__all__ = ["Settings", "build_plan", "results_root", "check_settings", "load_vendor", "round_key", "CaseSpec"]
