"""Validate every setting and case spec, then lay out the run: which rounds, on which hosts.

This is the one home of validation. The wrapper calls it before starting Ansible; the
``flagperf_plan`` filter calls it again inside the playbooks, so ``site.yml`` run on its own is
checked the same way. Both run on the controller before any host is touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from flagperf_ansible.config.cases import check_vendor_kit, effective_config, load_case
from flagperf_ansible.config.casespec import parse_case_spec
from flagperf_ansible.config.datasheet import datasheet_basis
from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.run.launch import framework_env_name, image_tag
from flagperf_ansible.config.launchers import LAUNCHERS
from flagperf_ansible.results.mfu import mfu_basis
from flagperf_ansible.config.settings import check_settings, templated
from flagperf_ansible.config.slurm import node_tokens
from flagperf_ansible.config.vendor import load_vendor


def _host_path(root: str, path: str) -> str:
    """A host path: relative paths are under ``flagperf_root``."""
    if not path or path.startswith("/") or templated(root):
        return path
    return f"{root.rstrip('/')}/{path}"


def results_root(results_dir: str, project: Path) -> Path:
    """The controller folder of the runs' results: ``flagperf_results_dir``, under the project
    checkout when relative."""
    path = Path(results_dir)
    if not path.is_absolute() and not templated(results_dir):
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
        ``{"vendor", "runtime", "backend", "slurm", "results_dir", "images", "envs", "cases":
        [...], "rounds": [...], "warnings"}`` (``warnings``: the vendor's new inference keys, seed 004; ``envs``, with
        runtime none: per framework whose vendor.yml entry sets ``venv``, the virtual
        environment prepare makes on each host, ``{"name", "path", "python", "requirements",
        "extra"}``, its folder under ``<flagperf_workdir>/envs`` named by its content) where each
        round is ``{"key", "case_id", "round", "model", "framework", "hosts", "master_addr",
        "nodes", "suite", "nnodes", "nproc_per_node", "launcher", "python", "vendor_dir",
        "case_dir", "entry", "timeout", "data_dir", "data_format", "checkpoint", "config", "overrides",
        "vendor_config", "profile",
        "contract", "env", "metric", "diagnostic", "large_artifacts", "mfu_basis",
        "datasheet_basis"}``
        (``nodes``: every node's address in noderank order; backend slurm: ``hosts`` the submit
        host, ``nodes`` and ``master_addr`` tokens for the job's nodes' addresses and
        ``node_names`` for their names, which the nodes replace; ``slurm``: the jobs' sbatch
        settings, None with backend ssh; runtime pyxis or apptainer: ``images`` maps each
        framework to its ``flagperf_container_images`` reference as ``name``;
        ``python``: the interpreter of the
        vendor's image for the framework; ``vendor_dir``: the vendor's folder, relative to the
        checkout, where its adapters live; ``case_dir``: the case folder, relative to the
        checkout; ``entry``: its file run as it is, or None where case.yml names a driver (the
        launch runs ``python -m driver.run --case <case_dir>``); ``profile``: the hardware profile's label or None on the
        standard configuration; ``contract``: ``CaseDef.contract``); ``"hosts"`` lists
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

    slurm = parsed.flagperf_backend == "slurm"
    runtime = parsed.flagperf_container_runtime
    if slurm and len(hosts) != 1:
        raise ConfigError(f"the slurm backend submits every round from one host: flagperf_hosts "
                          f"must hold that one host (a login node), not {len(hosts)}",
                          origin("flagperf_backend"), "flagperf_backend")
    if runtime in ("pyxis", "apptainer") and not slurm:
        raise ConfigError(f"runtime {runtime} runs containers in Slurm jobs: it needs "
                          "flagperf_backend: slurm", origin("flagperf_container_runtime"),
                          "flagperf_container_runtime")

    vendor_def = load_vendor(project, parsed.flagperf_vendor)
    check_vendor_kit(project, parsed.flagperf_vendor)
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
            case = load_case(project, spec.model, spec.framework, spec.suite)
            effective = effective_config(project, case, spec, parsed.flagperf_vendor)
            config, overrides, profile = effective.config, effective.overrides, effective.profile
        except ConfigError as err:
            if err.source:
                raise
            raise ConfigError(err.message, source, key) from None
        if runtime in ("pyxis", "apptainer") and spec.framework not in parsed.flagperf_container_images:
            raise ConfigError(f"runtime {runtime} needs the image of framework {spec.framework} "
                              f"in flagperf_container_images",
                              origin("flagperf_container_images"), "flagperf_container_images")
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
        if spec.nnodes > len(hosts) and not slurm:
            raise ConfigError(
                f"nnodes {spec.nnodes} is more than the {len(hosts)} host(s) in flagperf_hosts",
                source, f"{key}.nnodes")
        if spec.nproc_per_node > 1 and not LAUNCHERS[case.spec.launcher].per_node_processes:
            raise ConfigError(f"the case's launcher {case.spec.launcher} starts one process per "
                              "node: nproc_per_node must be 1", source, f"{key}.nproc_per_node")
        if case.needs_data and not spec.data_dir:
            raise ConfigError("this case needs data_dir: data_dir in its entry, or on the command "
                              "line --case SPEC=DATA_DIR (relative: under flagperf_root)",
                              source, f"{key}.data_dir")
        # Backend slurm: the job's nodes are known once it runs; until then, tokens the nodes
        # replace (config.slurm.node_tokens). Its one host is the submit host.
        round_hosts = hosts if slurm else hosts[: spec.nnodes]
        tokens = node_tokens(spec.nnodes) if slurm else None
        contract = case.contract()
        cases.append({"case_id": spec.case_id, "spec": spec.model_dump(), "metric": case.metric,
                      "suite": case.suite, "diagnostic": case.diagnostic,
                      "description": case.spec.description, "contract": contract,
                      "profile": profile, "requirements": list(case.spec.requirements),
                      "vendor_config": effective.vendor_config})
        sheet = vendor_def["datasheet"].get(spec.hardware) or {}
        mfu = case.spec.mfu
        # Seed 004's configurations say fp16 (true/false) where training cases say precision.
        precision = {"precision": "fp16" if config.get("fp16") else "fp32"} \
            if case.suite == "inference" else {}
        basis = mfu_basis(mfu.flops_per_unit.model_dump() if mfu else None,
                          case.spec.precision_peak, {**config, **precision}, sheet, spec.hardware,
                          spec.nnodes * spec.nproc_per_node,
                          mfu.throughput if mfu else case.spec.throughput.figure)
        compared = datasheet_basis(contract["metrics"], sheet, parsed.flagperf_vendor,
                                   spec.hardware, spec.nnodes)
        for number in range(1, spec.repeat + 1):
            rounds.append({
                "key": round_key(spec.case_id, number),
                "case_id": spec.case_id,
                "round": number,
                "model": spec.model,
                "framework": spec.framework,
                "hosts": round_hosts,
                "master_addr": tokens["nodes"][0] if tokens else str(addresses.get(round_hosts[0], round_hosts[0])),
                "nnodes": spec.nnodes,
                "nproc_per_node": spec.nproc_per_node,
                "nodes": tokens["nodes"] if tokens else [str(addresses.get(h, h)) for h in round_hosts],
                **({"node_names": tokens["hosts"]} if tokens else {}),
                "suite": case.suite,
                "launcher": case.spec.launcher,
                "python": vendor_def["python"].get(spec.framework, "python3"),
                "vendor_dir": f"vendors/{parsed.flagperf_vendor}",
                "case_dir": str(case.directory.relative_to(project)),
                "entry": (f"{case.directory.relative_to(project)}/{case.spec.entry}"
                          if case.spec.entry else None),
                "timeout": spec.timeout or case.spec.timeout,
                "data_dir": _host_path(parsed.flagperf_root, spec.data_dir),
                "config": config,
                "overrides": overrides,
                "vendor_config": effective.vendor_config,
                "metric": case.metric,
                "diagnostic": case.diagnostic,
                "contract": contract,
                "profile": profile,
                "data_format": contract["data_format"],
                "checkpoint": (profile or {}).get("checkpoint") or (
                    case.spec.checkpoint.model_dump() if case.spec.checkpoint else None),
                "env": dict(case.spec.env),
                "large_artifacts": list(case.spec.large_artifacts),
                "mfu_basis": basis,
                "datasheet_basis": compared,
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
            # The cases' own extra packages (case.yml requirements) go into the image too.
            extra = sorted({r for c in cases if c["spec"]["framework"] == framework
                            for r in c["requirements"]})
            images[framework] = {
                "name": name, "framework": framework, "requirements": extra,
                "tag": image_tag(project, parsed.flagperf_vendor, framework,
                                 {**inputs, "requirements": extra} if extra else inputs)}
    envs = {}
    if parsed.flagperf_container_runtime == "none":
        for framework in sorted({c["spec"]["framework"] for c in cases} & set(vendor_def["venv"])):
            extra = sorted({r for c in cases if c["spec"]["framework"] == framework
                            for r in c["requirements"]})
            requirements = f"vendors/{parsed.flagperf_vendor}/docker_image/{framework}/requirements.txt"
            try:
                name = framework_env_name(project, parsed.flagperf_vendor, framework, extra)
            except FileNotFoundError as error:
                raise ConfigError(str(error), f"vendors/{parsed.flagperf_vendor}/vendor.yml",
                                  f"frameworks.{framework}.venv") from None
            path = f"{parsed.flagperf_workdir.rstrip('/')}/envs/{name}"
            envs[framework] = {"name": name, "path": path, "python": f"{path}/bin/python",
                               "requirements": _host_path(parsed.flagperf_root, requirements),
                               "extra": extra}
    if runtime in ("pyxis", "apptainer"):
        images = {framework: {"name": parsed.flagperf_container_images[framework], "tag": "",
                              "framework": framework, "requirements": []}
                  for framework in sorted({c["spec"]["framework"] for c in cases})}
    return {
        "vendor": parsed.flagperf_vendor,
        "container": vendor_def["container"],
        "images": images,
        "backend": parsed.flagperf_backend,
        "slurm": {"partition": parsed.flagperf_slurm_partition,
                  "account": parsed.flagperf_slurm_account,
                  "qos": parsed.flagperf_slurm_qos,
                  "reservation": parsed.flagperf_slurm_reservation,
                  "time_limit": parsed.flagperf_slurm_time_limit,
                  "exclusive": parsed.flagperf_slurm_exclusive,
                  "options": list(parsed.flagperf_slurm_options)} if slurm else None,
        "envs": envs,
        "runtime": parsed.flagperf_container_runtime,
        "results_dir": str(results_dir),
        "cases": cases,
        "rounds": rounds,
        "hosts": [{"host": h, "address": str(addresses.get(h, h)), "label": f"host{i}"}
                  for i, h in enumerate(hosts)],
        "mask_hosts": parsed.flagperf_mask_hosts,
        # Seed 004: a vendor's new inference key is a warning, shown before the run.
        "warnings": sorted({w for c in cases for w in (c["vendor_config"] or {}).get("warnings", ())}),
    }
