"""Provenance of a run (what produced the figures) and host masking for shared documents.

``run.json`` records the project's git commit, the command, the inventory, the controller's
versions and the image; each node's ``sys_info.json`` (written on the host by
``src/flagperf_host/sys_info.py``) records its CPU, memory, kernel, accelerators and the
versions the case ran with.

Masking (``flagperf_mask_hosts``): every string of a document has each benchmark host's
inventory name and address replaced by its label ``host<i>`` (its index in ``flagperf_hosts``),
any other IPv4 address by ``x.x.x.x`` and IPv6 address by ``x::x``. Raw logs
(``rank<R>.out.log``, ``launcher.log``) are kept byte for byte as the case wrote them: they
are the evidence behind the figures (a speed index's copy of one is masked:
``speed_index``).
"""

from __future__ import annotations

import ipaddress
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")
MASKED_ADDRESS = "x.x.x.x"
#: A run of hex digits, colons and dots with a colon in it: an IPv6 address if ``ipaddress``
#: takes it (a time such as ``12:30:05`` is not one) and it has two groups or more (``::1``,
#: ``::`` and Python's ``[::2]`` stay), optionally with a zone (``%eth0``).
_IPV6_CANDIDATE = re.compile(r"(?<![\w.])[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[\w.-]+)?(?![\w:])")
MASKED_IPV6 = "x::x"
#: Set by the wrapper so run.json records the user's command, not ansible-runner's.
COMMAND_ENV = "FLAGPERF_COMMAND"


def host_label(noderank_or_index: int) -> str:
    """``host<i>``: a benchmark host's name in masked documents."""
    return f"host{int(noderank_or_index)}"


def node_dir_name(host: str, noderank: int, mask: bool = False) -> str:
    """``<host>_noderank<i>``: one host's folder in a round (``host<i>_noderank<i>`` masked)."""
    return f"{host_label(noderank) if mask else host}_noderank{noderank}"


def mask_ipv6(value: str) -> str:
    """``value`` with every IPv6 address (``fe80::1%eth0``, ``::ffff:10.0.0.1``) as ``x::x``."""
    if ":" not in value:
        return value

    def replace(match: re.Match) -> str:
        text = match.group(0)
        address = text.split("%", 1)[0].rstrip(".")
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            return text
        if len([group for group in address.split(":") if group]) < 2:
            return text
        return MASKED_IPV6 + ("." if text.endswith(".") else "")
    return _IPV6_CANDIDATE.sub(replace, value)


class Masker:
    """Replaces host names and addresses in documents.

    Args:
        hosts: ``[{host, address, label}]`` as in the plan's ``hosts``.
        enabled: when False, ``__call__`` returns documents unchanged.
    """

    def __init__(self, hosts: Iterable[Mapping[str, Any]], enabled: bool) -> None:
        self.enabled = enabled
        pairs: dict[str, str] = {}
        for item in hosts:
            for name in (item.get("host"), item.get("address")):
                if name:
                    pairs[str(name)] = str(item["label"])
        # Longest first so "node10" is not caught by "node1".
        names = sorted(pairs, key=len, reverse=True)
        self._pairs = pairs
        self._pattern = (re.compile("|".join(rf"(?<![\w.-]){re.escape(n)}(?![\w-]|\.\w)"
                                             for n in names)) if names else None)

    def text(self, value: str) -> str:
        """``value`` with host names, their addresses and other IPv4 and IPv6 addresses
        masked."""
        if not self.enabled:
            return value
        if self._pattern is not None:
            value = self._pattern.sub(lambda m: self._pairs[m.group(0)], value)
        return _IPV4.sub(MASKED_ADDRESS, mask_ipv6(value))

    def __call__(self, document: Any) -> Any:
        """A masked deep copy of a JSON-like document (keys and string values)."""
        if not self.enabled:
            return document
        if isinstance(document, dict):
            return {self.text(str(k)): self(v) for k, v in document.items()}
        if isinstance(document, list):
            return [self(v) for v in document]
        if isinstance(document, str):
            return self.text(document)
        return document


def git_commit(project: Path) -> dict[str, Any]:
    """``{commit, dirty}`` of the checkout (None values when it is not a git checkout)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(project), *args], capture_output=True,
                                  text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # Untracked files count: a new vendor override changes results as much as an edit.
    status = git("status", "--porcelain") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def package_version(name: str) -> str | None:
    """Installed version of a distribution, without importing it (None when absent)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def controller_provenance(project: Path, plan: Mapping[str, Any], inventory: str,
                          ansible_version: str | None = None) -> dict[str, Any]:
    """The provenance block of ``run.json``.

    Returns:
        ``{git, command, inventory: {name, hosts: [{host, address, label}]}, versions:
        {ansible, ansible_core, python, torch, transformers, flagperf_ansible}, image,
        controller: {platform}}``. Versions are the controller's; each node's own are in its
        ``sys_info.json``. ``image`` is None with runtime ``none`` (cases run on the host).
    """
    command = os.environ.get(COMMAND_ENV) or " ".join(sys.argv)
    return {
        "git": git_commit(project),
        "command": command,
        "inventory": {"name": inventory, "hosts": list(plan.get("hosts") or [])},
        "versions": {
            "ansible_core": ansible_version or package_version("ansible-core"),
            "ansible": package_version("ansible"),
            "python": platform.python_version(),
            "torch": package_version("torch"),
            "transformers": package_version("transformers"),
            "flagperf_ansible": package_version("flagperf-ansible"),
        },
        "image": None if plan.get("runtime") == "none" else plan.get("image"),
        "controller": {"platform": platform.platform()},
    }
