"""Case specs: what a user asks to run, in either of the two accepted forms.

A case spec names a case (model x framework, of a suite) and where and how often to run it.
Two input forms give the same structure:

* a mapping: ``{model: resnet50, framework: pytorch, hardware: cpu, nnodes: 1,
  nproc_per_node: 1, repeat: 2, data_dir: data/digits}``, with ``suite: inference`` or
  ``suite: base`` for a case of those suites;
* FlagPerf's training key ``model:framework:hardware:nnodes:nproc:repeat``, alone or as a
  one-entry mapping to its data_dir (FlagPerf's ``CASES = {key: data_dir}``).

Only the mapping names a ``profile`` other than the hardware's own (``profile: quick``: the
case's ``config/quick.yaml``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from flagperf_ansible.config.errors import ConfigError, raise_first

#: Names that end up in paths, container names and command lines.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: Paths that end up in command lines: no shell metacharacters, no parent-directory steps,
#: no leading '-' (it would read as an option).
PATH_PATTERN = re.compile(r"[A-Za-z0-9_./+@][A-Za-z0-9_./+@-]{0,4095}")

SPEC_KEYS = ("model", "framework", "hardware", "nnodes", "nproc_per_node", "repeat")


def check_name(value: str) -> str:
    """Accept a name that is safe in a path, a container name and an argv element.

    Raises:
        ValueError: anything but letters, digits, '_', '.', '-' (not first), or over 64 long.
    """
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a safe name (letters, digits, '_', '.', '-'; not starting "
            f"with '-', '.' or '_'; at most 64)"
        )
    return value


def check_path(value: str, home: bool = False) -> str:
    """Accept a path that is safe in an argv element and under a folder.

    Args:
        value: the path.
        home: also accept a leading ``~/`` (a controller path under the user's home).

    Raises:
        ValueError: a shell metacharacter, space, newline, a ``..`` step, or a leading '-'.
    """
    rest = value[2:] if home and isinstance(value, str) and value.startswith("~/") else value
    if not isinstance(rest, str) or not PATH_PATTERN.fullmatch(rest) \
            or ".." in rest.split("/"):
        allowed = "'~/' first, " if home else ""
        raise ValueError(
            f"{value!r} is not a safe path ({allowed}letters, digits, '_', '.', '/', '+', '@', "
            f"'-'; not starting with '-'; no '..')"
        )
    return value


def as_number(value: object) -> float | None:
    """``value`` as a float when it is a number (an int or a float; a bool is not), else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def not_bool(value: Any) -> Any:
    """Refuse ``true``/``false`` where a number is expected (pydantic would read them as 1/0).

    Raises:
        ValueError: ``value`` is a bool.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a number, not {str(value).lower()}")
    return value


#: A positive whole number; YAML's true/false are not numbers here.
Count = Annotated[int, BeforeValidator(not_bool), Field(gt=0)]

#: Upper bounds of a spec's counts: far beyond any cluster's, low enough that a plan (one entry
#: per round and node) is built at once. A typo such as a repeat of 10^21 is refused, not run.
MAX_NODES = 1024
MAX_PROCS_PER_NODE = 1024
MAX_REPEAT = 1000
#: Seconds: two weeks, beyond the longest of FlagPerf's published training runs.
MAX_TIMEOUT = 14 * 24 * 3600


class CaseSpec(BaseModel):
    """One requested case: ``nnodes`` hosts x ``nproc_per_node`` processes, ``repeat`` rounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    framework: str
    hardware: str
    #: Which family of cases ``model``/``framework`` names: training (FlagPerf's key, which
    #: also finds the diagnostic case), inference or base.
    suite: Literal["training", "inference", "base"] = "training"
    nnodes: Annotated[Count, Field(le=MAX_NODES)]
    nproc_per_node: Annotated[Count, Field(le=MAX_PROCS_PER_NODE)]
    repeat: Annotated[Count, Field(le=MAX_REPEAT)] = 1
    data_dir: str = ""
    #: Seconds a round may run before it is killed; None (unset) takes the case's own default.
    timeout: Annotated[Count, Field(le=MAX_TIMEOUT)] | None = None
    #: The case's profile to run (``config/<profile>.yaml``) instead of the hardware's own
    #: (``config/<hardware>.yaml``, if any); None: the hardware's.
    profile: str | None = None

    _names = field_validator("model", "framework", "hardware")(check_name)

    @field_validator("profile")
    @classmethod
    def _profile(cls, value: str | None) -> str | None:
        return check_name(value) if value is not None else value

    @field_validator("data_dir")
    @classmethod
    def _data_dir(cls, value: str) -> str:
        return check_path(value) if value else value

    @property
    def case_id(self) -> str:
        """``<model>-<framework>-<hardware>x<nnodes>x<nproc>``, e.g. ``resnet50-pytorch-A100x2x8``;
        inference and base cases name their suite: ``resnet50-pytorch-inference-A100x1x1``."""
        suite = "" if self.suite == "training" else f"{self.suite}-"
        return f"{self.model}-{self.framework}-{suite}{self.hardware_config}"

    @property
    def hardware_config(self) -> str:
        """``<hardware>x<nnodes>x<nproc>``: the name of a vendor's per-configuration override."""
        return f"{self.hardware}x{self.nnodes}x{self.nproc_per_node}"


#: The suites a key may name after ``model:framework`` (as ``flagperf-ansible cases`` lists them).
SUITES = ("training", "inference", "base")


def parse_case_key(key: str) -> dict[str, Any]:
    """Split a case key into a mapping: FlagPerf's ``model:framework:hardware:nnodes:nproc:
    repeat``, or with the suite that ``flagperf-ansible cases`` prints after the framework,
    ``model:framework:suite:hardware:nnodes:nproc:repeat`` (e.g.
    ``resnet50:pytorch:inference:cpu:1:1:1``); either may end in ``=DATA_DIR``.

    Raises:
        ValueError: the key has not six or seven fields (the seventh a suite), or a count is
            not an integer.
    """
    key, sep, data_dir = key.partition("=")
    fields = key.split(":")
    spec: dict[str, Any] = {}
    if len(fields) == len(SPEC_KEYS) + 1 and fields[2] in SUITES:
        spec["suite"] = fields.pop(2)
    if len(fields) != len(SPEC_KEYS):
        raise ValueError(
            f"{key!r} is not 'model:framework[:suite]:hardware:nnodes:nproc:repeat[=DATA_DIR]' "
            f"(suite one of {', '.join(SUITES)})")
    spec.update(zip(SPEC_KEYS[:3], fields[:3]))
    for name, text in zip(SPEC_KEYS[3:], fields[3:]):
        try:
            spec[name] = int(text)
        except ValueError:
            raise ValueError(f"{key!r}: {name} {text!r} is not an integer") from None
    if sep:
        spec["data_dir"] = data_dir
    return spec


def parse_case_spec(item: Any, source: str = "", key: str = "") -> CaseSpec:
    """Parse one entry of ``flagperf_cases`` in any accepted form.

    Args:
        item: a mapping, a key string (``parse_case_key``), or ``{key_string: data_dir}``.
        source, key: where the entry came from, for the error message.

    Raises:
        ConfigError: one line naming ``source`` and ``key`` (with the field at fault).
    """
    try:
        if isinstance(item, str):
            data = parse_case_key(item)
        elif isinstance(item, dict) and len(item) == 1 and isinstance(next(iter(item)), str) \
                and ":" in next(iter(item)):
            (case_key, data_dir), = item.items()
            data = parse_case_key(case_key)
            data["data_dir"] = data_dir
        elif isinstance(item, dict):
            data = dict(item)
        else:
            raise ValueError(
                f"a case spec is a mapping or a 'model:framework[:suite]:hardware:nnodes:nproc:"
                f"repeat[=DATA_DIR]' string, not {type(item).__name__}"
            )
    except ValueError as err:
        raise ConfigError(str(err), source, key) from None
    with raise_first(source, key):
        return CaseSpec.model_validate(data)
