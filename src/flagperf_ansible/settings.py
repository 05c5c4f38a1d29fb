"""The ``flagperf_*`` settings: their schema and the checks of values that end up in paths,
command lines and container options. Defaults live in ``roles/flagperf/defaults/main.yml``."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Mapping

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from flagperf_ansible.casespec import check_name, check_path, not_bool
from flagperf_ansible.errors import ConfigError, raise_first

IMAGE_PATTERN = re.compile(r"[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_.-]{1,128})?")
#: Environment variable names (POSIX portable names).
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RUN_ID_PATTERN = re.compile(r"run[0-9]{14}")
#: One OpenSSH public key line: type, base64 key, optional comment.
PUBLIC_KEY_PATTERN = re.compile(r"(ssh|ecdsa|sk)-[A-Za-z0-9@.-]+ [A-Za-z0-9+/]+={0,3}( [^\r\n]*)?")
SIZE_PATTERN = re.compile(r"[0-9]+[bkmgBKMG]?")
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
    """The ``flagperf_*`` settings; defaults live in ``roles/flagperf/defaults/main.yml``."""

    model_config = ConfigDict(extra="forbid")

    flagperf_vendor: str
    flagperf_container_runtime: Literal["none", "docker"]
    flagperf_results_dir: str
    flagperf_clear_caches: bool
    flagperf_master_port: Port
    flagperf_cases: list[Any] = Field(min_length=1)
    #: Where deploy puts benchmarks/ and vendors/ on the hosts (absolute). The default,
    #: /opt/flagperf, suits a root ssh user; a non-root one sets a folder under its home
    #: (inventories/lab: /home/bench/flagperf). Preflight stops the run, one line per host, where
    #: the ssh user cannot make or write it (src/flagperf_ansible/host_folders_check.py).
    flagperf_root: str
    #: Host folder for round outputs, monitor pid files and image build contexts (absolute;
    #: default /var/tmp/flagperf). Checked by preflight like flagperf_root.
    flagperf_workdir: str
    flagperf_python: str
    flagperf_monitor_interval: Seconds
    flagperf_wait_slice: Annotated[float, BeforeValidator(not_bool), Field(ge=0.01, le=3600)] = 10
    flagperf_env: dict[str, Any] = {}
    flagperf_known_hosts_file: str
    #: Trust only host keys pinned in flagperf_known_hosts_file (an unknown host fails).
    flagperf_ssh_strict_host_keys: bool = False
    flagperf_ssh_public_key: str
    flagperf_ssh_mesh: bool
    flagperf_base_image: str
    flagperf_image_wheels: list[str]
    flagperf_pip_ca_bundle: str
    # The package index of the image builds' pip ("": PyPI); not part of the image tag.
    flagperf_pip_index_url: str = ""
    flagperf_pip_extra_index_url: str = ""
    flagperf_mask_hosts: bool = False
    flagperf_keep_workdir: bool = False
    flagperf_run_id: str = ""
    flagperf_select: str = ""

    _vendor = field_validator("flagperf_vendor")(check_name)

    @field_validator("flagperf_root", "flagperf_workdir", "flagperf_python", "flagperf_results_dir")
    @classmethod
    def _paths(cls, value: str) -> str:
        return value if templated(value) else check_path(value)

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
        return Settings.model_validate(dict(settings))
