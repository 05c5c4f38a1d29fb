"""The inference suite's configuration, as seed 004 states it (FlagPerf ``inference/tools/
config_manager.py``: ``merge_config``, ``merge_vendor``; ``../shared/UPSTREAM.md`` section 3).

A case of suite ``inference`` keeps, in ``benchmarks/inference/<model>/<framework>/config/``:

* ``configurations.yaml``: the seed's keys (``CONFIGURATION_KEYS``), with the standard
  (nvidia) values; a vendor may change them;
* ``parameters.yaml``: the case's own keys (sequence length, weights folder, the accuracy bound
  ``target_acc_gap``), never changed by a vendor;
* ``<hardware>.yaml``: a profile, as for every suite (``cases.profile_of``).

A vendor's ``vendors/<vendor>/inference/<model>-<framework>/vendor_config/<vendor>_configurations.yaml``
is merged into the configurations by the seed's rules (``apply_vendor_config``):

* a key that collides with the host's keys (``HOST_KEYS``) or with parameters.yaml: error;
* a key that configurations.yaml lacks: added, with a warning (the seed's "New Config Set");
* a key whose value differs from the one it replaces: changed, and recorded;
* a key whose value equals the one it replaces: error (the seed's "Redundant Config Set").

The four switches (``check_switches``), exactly as the seed states them: ``compiler: null``
ends the case after framework validation; ``no_validation: true`` builds no model and needs
``exist_onnx_path``; ``exist_onnx_path`` skips the ONNX export; ``exist_compiler_path`` skips
the compile. A contradictory combination is an error before anything runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from flagperf_ansible.config.case_schema import StandardConfig, evaluate_formula
from flagperf_ansible.config.casespec import not_bool
from flagperf_ansible.config.errors import ConfigError, raise_first
from flagperf_ansible.config.yamlio import read_yaml

#: The keys of ``configurations.yaml`` (seed 004).
CONFIGURATION_KEYS = ("batch_size", "flops", "fp16", "compiler", "num_workers", "log_freq",
                      "repeat", "no_validation", "exist_onnx_path", "exist_compiler_path")
#: The case's own files in its ``config/`` (beside its profiles).
CASE_FILES = ("configurations", "parameters")
#: Keys the host side sets in the seed's runner (``run_inference.py`` arguments): no file sets them.
HOST_KEYS = ("perf_dir", "data_dir", "log_dir", "vendor", "case", "framework")

Count = Annotated[int, BeforeValidator(not_bool), Field(gt=0)]


class Configurations(BaseModel):
    """``configurations.yaml``: every key of the seed, no other."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_size: Count
    #: FLOPs per item: a number, or a product such as ``2*512*0.33e9`` (parsed, never run).
    flops: float | str
    fp16: bool
    compiler: str | None
    num_workers: Annotated[int, BeforeValidator(not_bool), Field(ge=0)]
    log_freq: Count
    repeat: Count
    no_validation: bool
    exist_onnx_path: str | None
    exist_compiler_path: str | None


def _shown(path: Path, project: Path) -> str:
    return str(path.relative_to(project)) if path.is_relative_to(project) else str(path)


def _mapping(path: Path, project: Path) -> dict[str, Any]:
    data = read_yaml(path, project)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping", _shown(path, project))
    return data


def flops_value(value: Any, shown: str) -> float:
    """``flops`` as a number: a YAML number, or the seed's formula string of numbers.

    Raises:
        ConfigError: neither a positive number nor an arithmetic product of numbers.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        try:
            number = evaluate_formula(str(value), {}) if isinstance(value, str) else None
        except ValueError:
            number = None
    if number is None or number <= 0 or not math.isfinite(number):
        raise ConfigError(f"{value!r} is not a positive number or a product of numbers such as "
                          "2*512*0.33e9", shown, "flops")
    return number


def load_standard(directory: Path, project: Path) -> StandardConfig:
    """A case's ``configurations.yaml`` and ``parameters.yaml`` as one standard configuration:
    ``params`` both (``flops`` as a number), ``mutable`` the configurations' keys.

    Raises:
        ConfigError: a file is malformed, a key is the host's, or the two files share a key.
    """
    config_dir = directory / "config"
    path = config_dir / "configurations.yaml"
    shown = _shown(path, project)
    if not path.is_file():
        raise ConfigError("an inference case keeps its configuration here (seed 004)", shown)
    with raise_first(shown, ""):
        configurations = Configurations.model_validate(_mapping(path, project)).model_dump()
    configurations["flops"] = flops_value(configurations["flops"], shown)
    params_path = config_dir / "parameters.yaml"
    parameters = _mapping(params_path, project) if params_path.is_file() else {}
    for key in parameters:
        if key in HOST_KEYS:
            raise ConfigError("a key the host sets (seed 004)", _shown(params_path, project), str(key))
        if key in configurations:
            raise ConfigError("also a key of configurations.yaml: the two files share no key "
                              "(seed 004)", _shown(params_path, project), str(key))
    return StandardConfig(params={**configurations, **parameters},
                          mutable=list(configurations))


def vendor_config_path(vendor_case_dir: Path, vendor: str) -> Path:
    """``<vendor case folder>/vendor_config/<vendor>_configurations.yaml``."""
    return vendor_case_dir / "vendor_config" / f"{vendor}_configurations.yaml"


def check_configurations(config: Mapping[str, Any], origin: Callable[[str], str]) -> None:
    """The effective ``configurations.yaml`` keys against the seed's types and bounds.

    Args:
        config: the configuration (case, profile, vendor merged).
        origin: the file that set a key, for the message.

    Raises:
        ConfigError: naming that file and the key.
    """
    with raise_first(origin):
        Configurations.model_validate({k: config[k] for k in CONFIGURATION_KEYS})


def check_engine(config: Mapping[str, Any], project: Path, vendor: str,
                 origin: Callable[[str], str]) -> None:
    """The ``compiler`` must name one of the vendor's engines
    (``vendors/<vendor>/inference_engine/<compiler>.py``), by name, not by path; the vendor's
    numbers must be finite.

    Raises:
        ConfigError: naming the file that set ``compiler`` (or the number) and the key.
    """
    for key, value in config.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{value!r} is not a finite number", origin(key), key)
    compiler = config.get("compiler")
    if compiler is None:
        return
    folder = project / "vendors" / vendor / "inference_engine"
    known = sorted(p.stem for p in folder.glob("*.py") if not p.name.startswith("_"))
    if not isinstance(compiler, str) or compiler not in known:
        have = f"it has {', '.join(known)}" if known else "it has none"
        raise ConfigError(f"vendor {vendor} has no engine {compiler!r} "
                          f"(vendors/{vendor}/inference_engine/<name>.py; {have})",
                          origin("compiler"), "compiler")


def apply_vendor_config(path: Path, project: Path, vendor: str, config: dict[str, Any],
                        parameters: list[str], origins: Mapping[str, str] | None = None,
                        ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Merge a vendor's configurations file into ``config`` by the seed's rules.

    Args:
        path: the vendor's file (``vendor_config_path``); absent: nothing changes.
        config: the case's configuration so far (standard, then its profile).
        parameters: the keys of ``parameters.yaml``, which no vendor sets.
        origins: the file each key of ``config`` came from, for a bad value the vendor's
            file does not set.

    Returns:
        ``(config, record)``: the merged configuration and ``{file, changed: {key: {default,
        value}}, added: {key: value}, warnings: [str]}`` (None values when there is no file).

    Raises:
        ConfigError: naming the file and key: a host key, a parameters key, a value equal to
        the one it replaces, or a malformed file.
    """
    if not path.is_file():
        return config, {"file": None, "changed": {}, "added": {}, "warnings": []}
    shown = _shown(path, project)
    data = _mapping(path, project)
    merged = dict(config)
    changed: dict[str, Any] = {}
    added: dict[str, Any] = {}
    warnings = []
    for key, value in data.items():
        key = str(key)
        if key in HOST_KEYS:
            raise ConfigError("a key the host sets: no vendor sets it (seed 004)", shown, key)
        if key in parameters:
            raise ConfigError("a key of the case's parameters.yaml: no vendor sets it (seed 004)",
                              shown, key)
        if key == "flops":
            value = flops_value(value, shown)
        if key not in config:
            added[key] = value
            warnings.append(f"{shown}: new key {key} set by vendor {vendor}")
        elif config[key] == value:
            raise ConfigError(f"equals the value it replaces ({value!r}): a redundant setting "
                              "(seed 004)", shown, key)
        else:
            changed[key] = {"default": config[key], "value": value}
        merged[key] = value
    if set(data) & set(CONFIGURATION_KEYS):
        check_configurations(merged, lambda key: shown if key in data or not origins
                             else origins.get(key, shown))
    return merged, {"file": shown, "changed": changed, "added": added, "warnings": warnings}


def check_switches(config: dict[str, Any], origins: dict[str, str]) -> None:
    """The seed's four switches must not contradict each other.

    Args:
        config: the effective configuration.
        origins: the file that set each key last, for the message.

    Raises:
        ConfigError: naming the file and key: ``no_validation`` without ``exist_onnx_path``;
        ``compiler: null`` with ``no_validation`` (nothing would run), with
        ``exist_onnx_path`` or with ``exist_compiler_path`` (nothing would read them).
    """
    def fail(message: str, key: str) -> None:
        raise ConfigError(message, origins.get(key, "configurations.yaml"), key)

    if config.get("no_validation") and not config.get("exist_onnx_path"):
        fail("no_validation builds no model, so it needs exist_onnx_path (seed 004)",
             "no_validation")
    if config.get("compiler") is None:
        if config.get("no_validation"):
            fail("compiler null ends after validation and no_validation skips it: nothing "
                 "would run", "no_validation")
        for key in ("exist_onnx_path", "exist_compiler_path"):
            if config.get(key):
                fail(f"compiler null ends after validation: nothing reads {key}", key)
