"""A vendor's definition, ``vendors/<vendor>/vendor.yml``: the hardware it declares, how its
containers run, its datasheet per hardware (``flagperf_ansible.config.datasheet``) and its frameworks'
images."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, field_validator

from flagperf_ansible.config.casespec import check_name, check_path
from flagperf_ansible.config.datasheet import Datasheet
from flagperf_ansible.config.errors import ConfigError, raise_first
from flagperf_ansible.config.settings import ENV_NAME_PATTERN, SIZE_PATTERN, check_env
from flagperf_ansible.config.yamlio import read_yaml

#: A device passed into a container: host path, optional container path and permissions.
DEVICE_PATTERN = re.compile(r"/dev/[A-Za-z0-9_./-]+(:/dev/[A-Za-z0-9_./-]+)?(:[rwm]{1,3})?")


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


class FrameworkImage(BaseModel):
    """``vendors/<vendor>/vendor.yml: frameworks.<framework>``: what the vendor's image of a
    framework runs cases with."""

    model_config = ConfigDict(extra="forbid")

    #: The interpreter inside the image (the launcher's argv[0] for Python launchers).
    python: str = "python3"
    #: Container runtime none: run the cases in a virtual environment that prepare makes on each
    #: host from the image's ``requirements.txt`` (roles/framework_env), instead of in
    #: ``flagperf_python`` (the host's own stack, e.g. its PyTorch).
    venv: bool = False

    _python = field_validator("python")(check_path)


class VendorDef(BaseModel):
    """``vendors/<vendor>/vendor.yml``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    hardware: list[str] = []
    container: ContainerOptions = ContainerOptions()
    datasheet: dict[str, Datasheet] = {}
    frameworks: dict[str, FrameworkImage] = {}

    _names = field_validator("name")(check_name)

    @field_validator("hardware", "frameworks", "datasheet")
    @classmethod
    def _keys(cls, value: Any) -> Any:
        for name in value:
            check_name(name)
        return value


def vendor_file(project: Path, vendor: str) -> Path:
    return project / "vendors" / vendor / "vendor.yml"


def read_vendor(project: Path, vendor: str) -> VendorDef:
    """Read and check ``vendors/<vendor>/vendor.yml``.

    Raises:
        ConfigError: naming vendor.yml and the key that is missing or malformed.
    """
    path = vendor_file(project, vendor)
    shown = str(path.relative_to(project))
    data = read_yaml(path, project) or {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping (name, hardware, container, ...)", shown)
    with raise_first(shown):
        return VendorDef.model_validate(data)


def load_vendor(project: Path, vendor: str) -> dict[str, Any]:
    """The plan's view of a vendor, from one read of vendor.yml: ``{"hardware": [...],
    "container": {...}, "python": {framework: interpreter}, "venv": [frameworks whose cases run
    in a virtual environment with runtime none], "datasheet": {hardware:
    Datasheet.plain()}}``, container options as the vendor set them, the datasheet empty where
    it states none.

    Raises:
        ConfigError: see ``read_vendor``.
    """
    definition = read_vendor(project, vendor)
    return {"hardware": list(definition.hardware),
            "container": definition.container.model_dump(exclude_unset=True),
            "python": {k: v.python for k, v in definition.frameworks.items()},
            "venv": sorted(k for k, v in definition.frameworks.items() if v.venv),
            "datasheet": {hardware: sheet.plain()
                          for hardware, sheet in definition.datasheet.items()}}


def hardware_of_device(project: Path, vendor: str, device_name: str) -> str | None:
    """The hardware of ``vendors/<vendor>/vendor.yml`` whose datasheet lists ``device_name``
    (as the device reports it, e.g. ``NVIDIA H200``) in ``device_names``; None when none does.

    Raises:
        ConfigError: see ``read_vendor``.
    """
    definition = read_vendor(project, vendor)
    for hardware, sheet in definition.datasheet.items():
        if device_name.strip() in sheet.device_names:
            return hardware
    return None
