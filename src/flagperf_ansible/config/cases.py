"""The cases of every suite, their ``case.yml`` (``case_schema``) and their configurations.

Where a case lives (FlagPerf keeps training and inference apart):

* training and diagnostic cases: ``benchmarks/<model>/<framework>/`` (FlagPerf's
  ``training/benchmarks/<model>/<framework>``);
* inference and base cases: ``benchmarks/<suite>/<model>/<framework>/``.

Configuration layering (DESIGN.md "Configuration rules"), lowest first:

1. ``config/standard.yaml``: ``params`` (the standard configuration, FlagPerf's reference
   recipe), ``mutable`` (the keys a vendor may override), ``fixed`` (keys no profile changes);
2. ``config/<hardware>.yaml`` if present: the case's profile for a kind of hardware (``cpu``
   trains on small data): ``profile`` (what it is, what it reduces) and ``params``; any key of
   the standard configuration but the fixed ones. A case spec may name another of the case's
   profiles instead (``profile: quick``: ``config/quick.yaml``). A round on a profile says so
   in its results;
3. ``vendors/<vendor>/[<suite>/]<model>-<framework>/config/<hardware>x<nnodes>x<nproc>.yaml``
   if present: the vendor's override, mutable keys only, each different from the value it
   replaces (``<suite>/`` for base cases).

Inference cases keep seed 004's files instead (``flagperf_ansible.config.inference_config``):
``config/configurations.yaml`` and ``config/parameters.yaml`` in place of standard.yaml, the
profile as above, then the vendor's ``vendors/<vendor>/inference/<model>-<framework>/
vendor_config/<vendor>_configurations.yaml`` by the seed's rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel

from flagperf_ansible.config import inference_config
from flagperf_ansible.config.base_config import check_base_params
from flagperf_ansible.config.case_schema import EVALUATE_BASELINES, CaseFile, ProfileConfig, \
    Scaling, StandardConfig, Target, formula_keys, world_size
from flagperf_ansible.config.casespec import CaseSpec, as_number
from flagperf_ansible.config.errors import ConfigError, raise_first
from flagperf_ansible.config.suites import suite as suite_of
from flagperf_ansible.config.yamlio import read_yaml

#: Suites whose cases live in their own folder under ``benchmarks/``.
SUITE_FOLDERS = ("inference", "base")
#: Files of a case's ``config/`` that are not profiles (inference: seed 004's two files).
NOT_PROFILES = ("standard", "sources", *inference_config.CASE_FILES)
#: Folders under ``benchmarks/`` that are not models.
NOT_MODELS = (*SUITE_FOLDERS, "driver")


def case_dir(project: Path, suite: str, model: str, framework: str) -> Path:
    """The folder of a case of ``suite`` (training and diagnostic share FlagPerf's layout)."""
    base = project / "benchmarks"
    return (base / suite if suite in SUITE_FOLDERS else base) / model / framework


def vendor_case_dir(project: Path, vendor: str, suite: str, model: str, framework: str) -> Path:
    """``vendors/<vendor>/[<suite>/]<model>-<framework>``: a vendor's overrides and adapter."""
    base = project / "vendors" / vendor
    return (base / suite if suite in SUITE_FOLDERS else base) / f"{model}-{framework}"


@dataclass(frozen=True)
class CaseDef:
    """A case as its ``case.yml`` and ``config/standard.yaml`` declare it."""

    model: str
    framework: str
    directory: Path
    spec: CaseFile
    standard: StandardConfig

    @property
    def suite(self) -> str:
        return self.spec.suite

    @property
    def diagnostic(self) -> bool:
        return self.spec.suite == "diagnostic"

    @property
    def needs_data(self) -> bool:
        return self.spec.data is not None

    @property
    def metric(self) -> str | None:
        """The target's metric without ``final_`` (``acc1``), FlagPerf's name for it."""
        if self.spec.target is None:
            return None
        name = self.spec.target.metric
        return name[len("final_"):] if name.startswith("final_") else name

    @property
    def key(self) -> str:
        """``model:framework``, with ``:suite`` where the suite is not training."""
        tail = f":{self.suite}" if self.suite in SUITE_FOLDERS else ""
        return f"{self.model}:{self.framework}{tail}"

    def contract(self) -> dict[str, Any]:
        """What the controller judges the case's rounds by, as plain data for the plan:
        ``{suite, kind, metrics, target, also_targets, throughput, window, data_format,
        references}``, and ``speed_index`` where the case declares one
        (``window``: the monitoring window's PerfLog events, the suite's unless the case sets
        its own; ``references``: the published figures, each ``case_schema.Reference`` as a
        mapping with its ``label`` filled in)."""
        spec = self.spec
        window = (spec.monitoring.start, spec.monitoring.end) if spec.monitoring \
            else suite_of(spec.suite).window
        return {"suite": spec.suite, "kind": spec.kind,
                "metrics": {k: m.model_dump() for k, m in spec.metrics.items()},
                "target": spec.target.model_dump() if spec.target else None,
                "also_targets": [t.model_dump() for t in spec.also_targets],
                "throughput": spec.throughput.model_dump(),
                "window": list(window),
                "data_format": spec.data.format if spec.data else None,
                "references": [{**ref.model_dump(), "label": ref.shown_label}
                               for ref in spec.references],
                **({"speed_index": spec.speed_index.model_dump()} if spec.speed_index else {})}


def _shown(path: Path, project: Path) -> str:
    return str(path.relative_to(project)) if path.is_relative_to(project) else str(path)


def _parse(model: type[BaseModel], path: Path, project: Path) -> Any:
    """Read ``path`` into ``model``; ``ConfigError`` naming the file and key on any problem."""
    data = read_yaml(path, project)
    shown = _shown(path, project)
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping", shown)
    with raise_first(shown, ""):
        return model.model_validate(data)


def load_case(project: Path, model: str, framework: str, suite: str = "training") -> CaseDef:
    """Read a case's ``case.yml`` and ``config/standard.yaml``.

    Args:
        suite: the case spec's suite; ``training`` also finds diagnostic cases, which share
            the training layout.

    Raises:
        ConfigError: no such case, or a file of it is malformed (naming the file and key).
    """
    directory = case_dir(project, suite, model, framework)
    path = directory / "case.yml"
    if not path.is_file():
        known = ", ".join(c.key for c in list_cases(project))
        name = f"{model}:{framework}" + (f" ({suite})" if suite != "training" else "")
        raise ConfigError(f"no case {name} (known: {known})")
    spec = _parse(CaseFile, path, project)
    expected = {"inference": ("inference",), "base": ("base",)}.get(suite, ("training", "diagnostic"))
    if spec.suite not in expected:
        raise ConfigError(f"a {spec.suite} case does not belong under "
                          f"{_shown(directory.parent.parent, project)}/", _shown(path, project),
                          "suite")
    if spec.entry is not None and not (directory / spec.entry).is_file():
        raise ConfigError(f"no file {spec.entry} in the case folder", _shown(path, project), "entry")
    if spec.driver is not None:
        _check_module(project, spec.driver, _shown(path, project), "driver")
    if spec.model is not None and spec.model.builder.split(".")[0] in _benchmark_packages(project):
        _check_module(project, spec.model.builder.rsplit(".", 1)[0], _shown(path, project),
                      "model.builder")
    if spec.data is not None:
        from flagperf_ansible import datasets
        if spec.data.format not in datasets.names():
            raise ConfigError(f"no data format {spec.data.format!r} (known: "
                              f"{', '.join(datasets.names())})", _shown(path, project),
                              "data.format")
    if spec.suite == "inference":
        standard = inference_config.load_standard(directory, project)
    else:
        standard = _parse(StandardConfig, directory / "config" / "standard.yaml", project)
    case = CaseDef(model, framework, directory, spec, standard)
    _check_contract_keys(case, _shown(path, project))
    return case


def _benchmark_packages(project: Path) -> set[str]:
    """The top-level packages under ``benchmarks/`` (``driver`` and every model folder): what
    the launch's ``PYTHONPATH`` makes importable besides the environment's own."""
    return {p.name for p in (project / "benchmarks").iterdir() if p.is_dir()}


def _check_module(project: Path, module: str, shown: str, key: str) -> None:
    """A module under ``benchmarks/`` (``driver.torch.trainer``, ``bert.pytorch.model``) must
    be a file there: the case would otherwise fail on the host, after the deploy."""
    base = project / "benchmarks" / Path(*module.split("."))
    if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
        raise ConfigError(f"no module {module} under benchmarks/ (benchmarks/"
                          f"{'/'.join(module.split('.'))}.py)", shown, key)


def _check_contract_keys(case: CaseDef, shown: str) -> None:
    """case.yml keys that name configuration keys must name parameters of the case."""
    params = case.standard.params
    for name in case.spec.model.config_keys() if case.spec.model else ():
        if name not in params:
            raise ConfigError(f"{name!r} is not a key of config/standard.yaml params", shown,
                              "model.arguments")
    target, flops = case.spec.target, case.spec.mfu.flops_per_unit if case.spec.mfu else None
    if target and target.config_key not in params:
        raise ConfigError(f"{target.config_key!r} is not a key of config/standard.yaml params",
                          shown, "target.config_key")
    for index, also in enumerate(case.spec.also_targets):
        if also.config_key not in params:
            raise ConfigError(f"{also.config_key!r} is not a key of config/standard.yaml "
                              "params (null there: no such target in the standard "
                              "configuration)", shown, f"also_targets[{index}].config_key")
    if flops and flops.scale_key and flops.scale_key not in params:
        raise ConfigError(f"{flops.scale_key!r} is not a key of config/standard.yaml params",
                          shown, "mfu.flops_per_unit.scale_key")
    index = case.spec.speed_index
    if index and index.batch_key not in params:
        raise ConfigError(f"{index.batch_key!r} is not a key of config/standard.yaml params",
                          shown, "speed_index.batch_key")
    if flops and flops.formula:
        for name in formula_keys(flops.formula):
            if name not in params:
                raise ConfigError(f"{name!r} is not a key of config/standard.yaml params",
                                  shown, "mfu.flops_per_unit.formula")


def list_cases(project: Path) -> list[CaseDef]:
    """Every case of every suite under ``benchmarks/``, sorted by suite, model and framework."""
    found: list[tuple[str, Path]] = [
        ("training", p) for p in project.glob("benchmarks/*/*/case.yml")
        if p.parent.parent.name not in NOT_MODELS]
    for suite in SUITE_FOLDERS:
        found += [(suite, p) for p in project.glob(f"benchmarks/{suite}/*/*/case.yml")]
    cases = [load_case(project, p.parent.parent.name, p.parent.name, suite) for suite, p in found]
    return sorted(cases, key=lambda c: (c.suite, c.model, c.framework))


def profile_of(project: Path, case: CaseDef, hardware: str,
               named: bool = False) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The case's profile ``config/<hardware>.yaml``: ``(label, params)``, or None when it has
    none.

    ``label`` is ``{name, standard: False, description, reduced, checkpoint, baselines,
    scaling}``, what results show (``checkpoint``: the profile's own initial checkpoint, or
    None; ``baselines``: ``{spread, basis, target}`` or None; ``scaling``: ``case_schema.
    Scaling`` as a mapping, or None: the topologies it holds at, see ``scale_to_topology``).
    A profile with baselines also sets the driver's ``evaluate_baselines`` in ``params``.

    Args:
        hardware: the profile's name: the spec's hardware, or the profile a spec names.
        named: a case spec named it (``profile:``): then it must exist.

    Raises:
        ConfigError: the profile is malformed, names a key that is not a parameter, changes a
        fixed key, gives baselines to a case that does not train, or names as their target a
        metric that is not one of its targets; scaling that changes such a key, or a global
        batch that does not divide among a listed topology's processes; a named profile the
        case does not have.
    """
    path = case.directory / "config" / f"{hardware}.yaml"
    if hardware in NOT_PROFILES or not path.is_file():
        if named:
            known = sorted(p.stem for p in (case.directory / "config").glob("*.yaml")
                           if p.stem not in NOT_PROFILES)
            raise ConfigError(f"profile: case {case.key} has no profile {hardware!r} "
                              f"(config/{hardware}.yaml; it has: {', '.join(known) or 'none'})")
        return None
    shown = _shown(path, project)
    profile = _parse(ProfileConfig, path, project)
    for key in profile.params:
        if key not in case.standard.params:
            raise ConfigError("unknown key (not in config/standard.yaml params)", shown,
                              f"params.{key}")
        if key in case.standard.fixed:
            raise ConfigError("a fixed key of this case (config/standard.yaml 'fixed'): no "
                              "profile changes it", shown, f"params.{key}")
    baselines = profile.profile.baselines
    label = {"name": hardware, "standard": False, "description": profile.profile.description,
             "reduced": list(profile.profile.reduced),
             "checkpoint": profile.checkpoint.model_dump() if profile.checkpoint else None,
             "baselines": baselines.model_dump() if baselines else None, "scaling": None}
    params = dict(profile.params)
    if baselines:
        if case.suite != "training":
            raise ConfigError("baselines are a training profile's (the untrained model and an "
                              "input-blind predictor scored against the target)", shown,
                              "profile.baselines")
        if baselines.target is not None:
            metrics = [t.metric for t in active_targets(case, {**case.standard.params, **params})]
            if baselines.target not in metrics:
                raise ConfigError(f"{baselines.target!r} is not a target of this profile "
                                  f"({', '.join(metrics)})", shown, "profile.baselines.target")
        # The driver's key (driver/convergence.py), not a case parameter.
        params[EVALUATE_BASELINES] = True
    scaling = profile.profile.scaling
    if scaling:
        _check_scaling(case, scaling, {**case.standard.params, **profile.params}, shown)
        label["scaling"] = scaling.model_dump()
    return label, params


def _check_scaling(case: CaseDef, scaling: Scaling, config: Mapping[str, Any],
                   shown: str) -> None:
    """The keys ``scaling`` sets must be parameters a profile may change; a global batch must
    divide among the processes of every topology it lists."""
    where = "profile.scaling"
    if scaling.rule == "global_batch":
        key = scaling.batch_key
        changed = {f"{where}.batch_key": [key]}
    else:
        changed = {f"{where}.topologies.{t}": list(p or {}) for t, p in scaling.topologies.items()}
    for at, keys in changed.items():
        for key in keys:
            if key not in case.standard.params:
                raise ConfigError(f"{key!r} is not a key of config/standard.yaml params", shown, at)
            if key in case.standard.fixed:
                raise ConfigError(f"{key!r} is a fixed key of this case: no profile changes it",
                                  shown, at)
    if scaling.rule == "global_batch":
        batch = as_number(config.get(key))
        if batch is None or batch != int(batch) or batch <= 0:
            raise ConfigError(f"{key} is {config.get(key)!r}, not a whole number of samples",
                              shown, f"{where}.batch_key")
        for topology in scaling.topologies:
            if batch % world_size(topology):
                raise ConfigError(f"the global batch {key} {int(batch)} does not divide among "
                                  f"the {world_size(topology)} processes of {topology}", shown,
                                  f"{where}.topologies")


def scale_to_topology(case: CaseDef, profile_name: str, label: dict[str, Any] | None,
                      config: Mapping[str, Any], nnodes: int,
                      nproc_per_node: int) -> dict[str, Any]:
    """The params the profile's ``scaling`` sets at ``nnodes`` x ``nproc_per_node``: the
    per-process batch (``global_batch``: the global batch over the world size) or the
    topology's own params (``per_topology``). Empty without scaling.

    Raises:
        ConfigError: one line naming the case, the topology and the topologies the profile
        holds at, where it does not hold at this one (no file or key: the case spec is at
        fault, and the caller names it).
    """
    scaling = (label or {}).get("scaling")
    if not scaling:
        return {}
    topology = f"{nnodes}x{nproc_per_node}"
    supported = list(scaling["topologies"])
    if topology not in supported:
        raise ConfigError(
            f"case {case.key} on profile {profile_name} holds its target at "
            f"{', '.join(supported)} ({scaling['rule']}), not at {topology} (nnodes x "
            f"nproc_per_node; config/{profile_name}.yaml profile.scaling)")
    if scaling["rule"] == "per_topology":
        return dict(scaling["topologies"][topology] or {})
    key = scaling["batch_key"]
    return {key: int(config[key]) // (nnodes * nproc_per_node)}


def check_layout(case: CaseDef, spec: CaseSpec, config: Mapping[str, Any]) -> None:
    """An LLM round's parallel layout must fit its world (``flagperf_host.parallel_layout``).

    Raises:
        ConfigError: one line naming the case, the topology and what does not divide (no file
        or key: the caller names the case spec).
    """
    from flagperf_host.parallel_layout import Layout

    try:
        Layout.of(config, spec.nnodes * spec.nproc_per_node)
    except ValueError as error:
        raise ConfigError(f"case {case.key} at {spec.nnodes}x{spec.nproc_per_node}: {error} "
                          f"(its configuration with the vendor's "
                          f"{spec.hardware_config}.yaml)") from None


def active_targets(case: CaseDef, config: Mapping[str, Any]) -> list[Target]:
    """The case's targets in effect under ``config`` (its effective parameters): its
    ``target``, then each of ``also_targets`` whose config key is set (not null)."""
    targets = [case.spec.target] if case.spec.target else []
    return targets + [t for t in case.spec.also_targets if config.get(t.config_key) is not None]


def vendor_overrides(project: Path, case: CaseDef, path: Path,
                     config: dict[str, Any]) -> dict[str, Any]:
    """Check one vendor override file against the case and return its keys.

    Raises:
        ConfigError: naming the file and key of an unknown key, an override of a key that is
        not mutable, or an override equal to the value it replaces in ``config``.
    """
    shown = _shown(path, project)
    data = read_yaml(path, project)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of hyper-parameters", shown)
    for key, value in data.items():
        if key not in config:
            raise ConfigError("unknown key", shown, str(key))
        if key not in case.standard.mutable:
            raise ConfigError(
                "not a mutable key of this case (see its config/standard.yaml 'mutable')",
                shown, str(key))
        if config[key] == value:
            raise ConfigError(f"override equals the standard value {value!r}", shown, str(key))
    return dict(data)


@dataclass(frozen=True)
class EffectiveConfig:
    """What one round runs with: ``config`` (the hyper-parameters), ``overrides`` (the
    vendor's keys among them), ``profile`` (the hardware profile's label, None on the standard
    configuration) and, for inference cases, ``vendor_config`` (``inference_config.
    apply_vendor_config``'s record: what the vendor changed and added, the warnings)."""

    config: dict[str, Any]
    overrides: dict[str, Any]
    profile: dict[str, Any] | None
    vendor_config: dict[str, Any] | None = None


def effective_config(project: Path, case: CaseDef, spec: CaseSpec, vendor: str) -> EffectiveConfig:
    """The configuration one round runs with: the standard one, the case's profile (the one
    the spec names, else the spec's hardware's) scaled to the spec's topology (the label's
    ``scaling.applied`` records what that set), then the vendor's (for inference cases by
    seed 004's rules).

    Raises:
        ConfigError: see ``profile_of``, ``scale_to_topology``, ``vendor_overrides``, ``inference_config`` and, for a
        base case, ``base_config.check_base_params``.
    """
    config = dict(case.standard.params)
    profile_name = spec.profile or spec.hardware
    profile = profile_of(project, case, profile_name, named=spec.profile is not None)
    label, params = profile if profile else (None, {})
    config.update(params)
    scaled = scale_to_topology(case, profile_name, label, config, spec.nnodes,
                               spec.nproc_per_node)
    if scaled:
        config.update(scaled)
        label = {**label, "scaling": {**label["scaling"], "applied": scaled}}
    folder = vendor_case_dir(project, vendor, case.suite, case.model, case.framework)
    if case.suite == "inference":
        parameters = [k for k in case.standard.params if k not in case.standard.mutable]
        config_dir = _shown(case.directory / "config", project)
        origins = {key: f"{config_dir}/{'parameters' if key in parameters else 'configurations'}.yaml"
                   for key in case.standard.params}
        origins.update({key: f"{config_dir}/{profile_name}.yaml" for key in params})
        path = inference_config.vendor_config_path(folder, vendor)
        config, record = inference_config.apply_vendor_config(path, project, vendor, config,
                                                              parameters, origins)
        origins.update({key: record["file"] for key in (*record["changed"], *record["added"])})
        default = f"{config_dir}/configurations.yaml"
        inference_config.check_configurations(config, lambda key: origins.get(key, default))
        inference_config.check_engine(config, project, vendor,
                                      lambda key: origins.get(key, default))
        inference_config.check_switches(config, origins)
        overrides = {**{k: v["value"] for k, v in record["changed"].items()}, **record["added"]}
        return EffectiveConfig(config, overrides, label, record)
    vendor_file = folder / "config" / f"{spec.hardware_config}.yaml"
    overrides = vendor_overrides(project, case, vendor_file, config) if vendor_file.is_file() else {}
    config.update(overrides)
    if case.spec.kind == "llm":
        check_layout(case, spec, config)
    if case.suite == "base":
        config_dir = case.directory / "config"
        origins = {key: _shown(config_dir / "standard.yaml", project) for key in config}
        origins.update({key: _shown(config_dir / f"{profile_name}.yaml", project)
                        for key in params})
        origins.update({key: _shown(vendor_file, project) for key in overrides})
        check_base_params(config, origins)
    return EffectiveConfig(config, overrides, label)


def check_vendor_kit(project: Path, vendor: str) -> int:
    """Check every case's configurations and every override file of ``vendor``, not only what
    a plan runs: each case.yml, standard.yaml and profile, and each
    ``vendors/<vendor>/[<suite>/]<model>-<framework>/config/*.yaml`` against its case (the
    profile of its hardware, if the case has one, applied first).

    Returns:
        The number of files checked.

    Raises:
        ConfigError: the first problem, naming its file and key.
    """
    checked = 0
    cases = list_cases(project)
    by_folder = {vendor_case_dir(project, vendor, c.suite, c.model, c.framework): c for c in cases}
    for case in cases:
        checked += 2
        for profile in sorted((case.directory / "config").glob("*.yaml")):
            if profile.stem not in NOT_PROFILES:
                profile_of(project, case, profile.stem)
                checked += 1
    vendor_root = project / "vendors" / vendor
    for path in sorted(vendor_root.glob("*/config/*.yaml")) + sorted(
            vendor_root.glob("*/*/config/*.yaml")):
        folder = path.parent.parent
        case = by_folder.get(folder)
        if case is None:
            if folder.parent.name in SUITE_FOLDERS or folder.parent == vendor_root:
                raise ConfigError(f"no case for this override folder ({folder.name})",
                                  _shown(path, project))
            continue
        hardware = path.stem.rsplit("x", 2)[0]
        config = dict(case.standard.params)
        profile = profile_of(project, case, hardware)
        if profile:
            config.update(profile[1])
            topology = path.stem.rsplit("x", 2)[1:]
            if len(topology) == 2 and all(part.isdigit() and int(part) for part in topology):
                try:
                    config.update(scale_to_topology(case, hardware, profile[0], config,
                                                    *map(int, topology)))
                except ConfigError:
                    pass  # no round runs it: effective_config refuses the topology
        vendor_overrides(project, case, path, config)
        checked += 1
    for path in sorted(vendor_root.glob("inference/*/vendor_config/*.yaml")):
        folder = path.parent.parent
        case = by_folder.get(folder)
        if case is None:
            raise ConfigError(f"no case for this vendor_config folder ({folder.name})",
                              _shown(path, project))
        expected = inference_config.vendor_config_path(folder, vendor)
        if path != expected:
            raise ConfigError(f"a vendor_config file of vendor {vendor} is named "
                              f"{expected.name} (seed 004)", _shown(path, project))
        parameters = [k for k in case.standard.params if k not in case.standard.mutable]
        inference_config.apply_vendor_config(path, project, vendor, dict(case.standard.params),
                                             parameters)
        checked += 1
    return checked
