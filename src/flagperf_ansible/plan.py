"""Validate every setting and case spec, then lay out the run: which rounds, on which hosts.

This is the one home of validation. The wrapper calls it before starting Ansible; the
``flagperf_plan`` filter calls it again inside the playbooks, so ``site.yml`` run on its own is
checked the same way. Both run on the controller before any host is touched.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from flagperf_ansible.cases import effective_config, load_case, read_yaml
from flagperf_ansible.casespec import CaseSpec, check_name, check_path, parse_case_spec
from flagperf_ansible.errors import ConfigError, raise_first
from flagperf_ansible.launch import image_tag
from flagperf_ansible.mfu import load_peaks, mfu_basis

IMAGE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_.-]{1,128})?$")


def _templated(value: str) -> bool:
    """A Jinja expression Ansible renders later (the wrapper sees inventory files raw)."""
    return "{{" in value


class Settings(BaseModel):
    """The ``flagperf_*`` settings; defaults live in ``roles/flagperf/defaults/main.yml``."""

    model_config = ConfigDict(extra="forbid")

    flagperf_vendor: str
    flagperf_container_runtime: Literal["none", "docker"]
    flagperf_results_dir: str
    flagperf_clear_caches: bool
    flagperf_master_port: int = Field(ge=1024, le=65535)
    flagperf_cases: list[Any] = Field(min_length=1)
    flagperf_root: str
    flagperf_workdir: str
    flagperf_python: str
    flagperf_monitor_interval: float = Field(gt=0, le=3600)
    flagperf_poll_interval: int = Field(default=1, ge=1, le=600)
    flagperf_wait_slice: int = Field(default=10, ge=1, le=3600)
    flagperf_env: dict[str, str | int | float] = {}
    flagperf_known_hosts_file: str
    flagperf_ssh_public_key: str
    flagperf_ssh_mesh: bool
    flagperf_base_image: str
    flagperf_image_wheels: list[str]
    flagperf_pip_ca_bundle: str
    flagperf_mask_hosts: bool = False
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

    @field_validator("flagperf_env")
    @classmethod
    def _env(cls, value: dict) -> dict:
        for key in value:
            if not str(key).replace("_", "a").isalnum() or str(key)[0].isdigit():
                raise ValueError(f"{key!r} is not an environment variable name")
        return value

    @field_validator("flagperf_base_image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not _templated(value) and not IMAGE_PATTERN.match(value):
            raise ValueError(f"{value!r} is not an image reference")
        return value

    @field_validator("flagperf_workdir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not _templated(value) and not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path on the hosts")
        return value

    @field_validator("flagperf_run_id")
    @classmethod
    def _run_id(cls, value: str) -> str:
        if value and (not value.startswith("run") or not value[3:].isdigit() or len(value) != 17):
            raise ValueError(f"{value!r} is not a run id 'run<YYYYmmddHHMMSS>'")
        return value


def _host_path(root: str, path: str) -> str:
    """A host path: relative paths are under ``flagperf_root``."""
    if not path or path.startswith("/") or _templated(root):
        return path
    return f"{root.rstrip('/')}/{path}"


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
        "overrides", "metric", "diagnostic", "mfu_basis"}``; ``"hosts"`` lists
        ``{host, address, label}`` per benchmark host and ``"mask_hosts"`` says whether
        documents show ``label`` (``host<i>``) instead of names and addresses.

    Raises:
        ConfigError: the first problem found, naming its file and key.
    """
    def origin(key: str) -> str:
        return origins.get(key, "extra vars")

    unknown = sorted(k for k in settings if k not in Settings.model_fields)
    if unknown:
        raise ConfigError("unknown setting (a typo?)", origin(unknown[0]), unknown[0])
    with raise_first(origin):
        parsed = Settings.model_validate(dict(settings))

    vendor_dir = project / "vendors" / parsed.flagperf_vendor
    if not (vendor_dir / "vendor.yml").is_file():
        known = ", ".join(sorted(p.parent.name for p in project.glob("vendors/*/vendor.yml")))
        raise ConfigError(f"no vendor {parsed.flagperf_vendor!r} (known: {known})",
                          origin("flagperf_vendor"), "flagperf_vendor")

    peaks = load_peaks(project, parsed.flagperf_vendor)
    source = origin("flagperf_cases")
    cases: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(parsed.flagperf_cases):
        key = f"flagperf_cases[{index}]"
        spec = parse_case_spec(item, source, key)
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
                "mfu_basis": mfu_basis(case.flops, case.precision_peak, config, peaks,
                                       spec.hardware, spec.nnodes * spec.nproc_per_node),
            })
    if parsed.flagperf_select and parsed.flagperf_select not in {r["key"] for r in rounds}:
        raise ConfigError(f"no round {parsed.flagperf_select!r} in this plan",
                          origin("flagperf_select"), "flagperf_select")

    results_dir = Path(parsed.flagperf_results_dir)
    if not results_dir.is_absolute() and not _templated(parsed.flagperf_results_dir):
        results_dir = project / results_dir
    vendor_def = read_yaml(vendor_dir / "vendor.yml", project) or {}
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
        "container": vendor_def.get("container") or {},
        "images": images,
        "runtime": parsed.flagperf_container_runtime,
        "results_dir": str(results_dir),
        "cases": cases,
        "rounds": rounds,
        "hosts": [{"host": h, "address": str(addresses.get(h, h)), "label": f"host{i}"}
                  for i, h in enumerate(hosts)],
        "mask_hosts": parsed.flagperf_mask_hosts,
    }


__all__ = ["Settings", "build_plan", "round_key", "CaseSpec"]
