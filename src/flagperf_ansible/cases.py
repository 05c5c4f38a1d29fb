"""The standard cases: ``benchmarks/<model>/<framework>/case.yml`` and its configurations.

Configuration layering (DESIGN.md "Configuration rules"), lowest first:

1. ``benchmarks/<model>/<framework>/config/standard.yaml``: ``params`` (the standard
   hyper-parameters) and ``mutable`` (the keys a vendor may override);
2. ``benchmarks/<model>/<framework>/config/<hardware>.yaml`` if present: a profile the case itself
   owns for a kind of hardware (``cpu`` trains on the small digits data set), any known key;
3. ``vendors/<vendor>/<model>-<framework>/config/<hardware>x<nnodes>x<nproc>.yaml`` if present:
   the vendor's override, mutable keys only, each different from the value it replaces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flagperf_ansible.casespec import CaseSpec
from flagperf_ansible.errors import ConfigError
from flagperf_ansible.mfu import check_case_flops

LAUNCHERS = ("torchrun", "python")


@dataclass(frozen=True)
class CaseDef:
    """A standard case as declared by its ``case.yml``."""

    model: str
    framework: str
    directory: Path
    description: str
    entry: str
    launcher: str
    metric: str
    timeout: int
    needs_data: bool
    diagnostic: bool = False
    mutable: tuple[str, ...] = field(default=())
    #: Training FLOPs per sample and their source (``flagperf_ansible.mfu``), or None.
    flops: dict[str, Any] | None = None
    #: Case ``precision`` value -> datasheet precision of the peak it runs at (amp -> bf16).
    precision_peak: dict[str, str] = field(default_factory=dict)
    #: Files the case writes that a round does not fetch (tar patterns: ONNX files, compiled
    #: engines, checkpoints); the collect role lists them as left out.
    large_artifacts: tuple[str, ...] = field(default=())


def read_yaml(path: Path, project: Path | None = None) -> Any:
    """Load a YAML file, raising ``ConfigError`` naming the file on a syntax error."""
    shown = str(path.relative_to(project)) if project and path.is_relative_to(project) else str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise ConfigError(f"{where}{problem}", shown) from None
    except OSError as err:
        raise ConfigError(err.strerror or str(err), shown) from None


def load_case(project: Path, model: str, framework: str) -> CaseDef:
    """Read ``benchmarks/<model>/<framework>/case.yml``.

    Raises:
        ConfigError: no such case, or its case.yml is malformed.
    """
    directory = project / "benchmarks" / model / framework
    path = directory / "case.yml"
    if not path.is_file():
        known = ", ".join(f"{c.model}:{c.framework}" for c in list_cases(project))
        raise ConfigError(f"no standard case {model}:{framework} (known: {known})")
    data = read_yaml(path, project) or {}
    shown = str(path.relative_to(project))
    standard = read_yaml(directory / "config" / "standard.yaml", project) or {}
    try:
        case = CaseDef(
            model=model,
            framework=framework,
            directory=directory,
            description=str(data["description"]),
            entry=str(data["entry"]),
            launcher=str(data.get("launcher", "torchrun")),
            metric=str(data["metric"]),
            timeout=int(data["timeout"]),
            needs_data=bool(data.get("needs_data", True)),
            diagnostic=bool(data.get("diagnostic", False)),
            mutable=tuple(standard.get("mutable", ())),
            flops=check_case_flops(data.get("flops_per_sample"), shown),
            precision_peak={str(k): str(v) for k, v in (data.get("precision_peak") or {}).items()},
            large_artifacts=tuple(str(p) for p in data.get("large_artifacts") or ()),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ConfigError(f"missing or bad key {err}", shown) from None
    if case.launcher not in LAUNCHERS:
        raise ConfigError(f"launcher must be one of {', '.join(LAUNCHERS)}", shown, "launcher")
    return case


def list_cases(project: Path) -> list[CaseDef]:
    """Every standard case under ``benchmarks/``, sorted by model and framework."""
    found = sorted(project.glob("benchmarks/*/*/case.yml"))
    return [load_case(project, p.parent.parent.name, p.parent.name) for p in found]


def _flat(path: Path, project: Path) -> dict[str, Any]:
    data = read_yaml(path, project)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of hyper-parameters", str(path.relative_to(project)))
    return data


def effective_config(
    project: Path, case: CaseDef, spec: CaseSpec, vendor: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The hyper-parameters one round runs with, and the vendor's overrides among them.

    Returns:
        ``(config, overrides)``: ``config`` maps every standard key to its effective value;
        ``overrides`` holds only the keys the vendor file changed.

    Raises:
        ConfigError: naming the file and key of an unknown key, an override of an immutable
        key, or an override equal to the value it replaces.
    """
    config_dir = case.directory / "config"
    standard_path = config_dir / "standard.yaml"
    standard = read_yaml(standard_path, project) or {}
    params = standard.get("params")
    if not isinstance(params, dict):
        raise ConfigError("required key is missing", str(standard_path.relative_to(project)), "params")
    config = dict(params)

    profile = config_dir / f"{spec.hardware}.yaml"
    if profile.is_file():
        for key, value in _flat(profile, project).items():
            if key not in config:
                raise ConfigError("unknown key", str(profile.relative_to(project)), str(key))
            config[key] = value

    overrides: dict[str, Any] = {}
    vendor_file = (project / "vendors" / vendor / f"{case.model}-{case.framework}" / "config"
                   / f"{spec.hardware_config}.yaml")
    if vendor_file.is_file():
        shown = str(vendor_file.relative_to(project))
        for key, value in _flat(vendor_file, project).items():
            if key not in config:
                raise ConfigError("unknown key", shown, str(key))
            if key not in case.mutable:
                raise ConfigError(
                    "not a mutable key of this case (see its config/standard.yaml 'mutable')",
                    shown, str(key),
                )
            if config[key] == value:
                raise ConfigError(f"override equals the standard value {value!r}", shown, str(key))
            config[key] = overrides[key] = value
    return config, overrides
