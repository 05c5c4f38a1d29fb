"""The base image the vendor images are built on, made without a registry.

``flagperf-base:<suite>`` is a minimal Debian (debootstrap's ``minbase`` variant) with
``python3``, ``python3-venv``, ``python3-pip`` and ``ca-certificates``: what
``vendors/cpu/docker_image/pytorch/Dockerfile`` needs (``python3 -m venv``, then pip in the venv).
It is debootstrapped from a Debian mirror into a folder and fed to ``docker import``; nothing is
pulled from a registry. ``flagperf-ansible image base`` and ``tests/loopback_cluster.py`` both
make it here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

DEFAULT_SUITE = "bookworm"
#: What the vendor Dockerfiles run in the base: python3 -m venv, pip, TLS to the package index.
PACKAGES = ("python3", "python3-venv", "python3-pip", "ca-certificates")
SUITE_PATTERN = re.compile(r"[a-z][a-z0-9-]{1,31}")
#: A Debian mirror debootstrap reads: http(s) or a local copy (file:///srv/debian).
MIRROR_PATTERN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%/+-]*)?"
                            r"|file:///[A-Za-z0-9._~%/+-]*")
#: What ``docker import`` leaves out, as ``apt-get clean`` and Debian's own images do: the
#: downloaded packages and the package lists (about 95 MB; ``apt-get update`` brings the lists).
EXCLUDED = ("./var/cache/apt/archives/*.deb", "./var/lib/apt/lists/*_*")


class BaseImageError(RuntimeError):
    """Making the image failed (debootstrap or docker import); the message is one line."""


@dataclass(frozen=True)
class Made:
    """A base image now in the local Docker engine.

    Attributes:
        name: the image reference (``name:tag``).
        seconds: wall-clock time it took to make, in seconds (0 when it was already there).
        size_bytes: the image's size as ``docker image inspect`` reports it (``.Size``, bytes).
        existed: it was there already and nothing was made.
    """

    name: str
    seconds: float
    size_bytes: int
    existed: bool = False


def default_name(suite: str = DEFAULT_SUITE) -> str:
    """``flagperf-base:<suite>``; for bookworm, the default of ``flagperf_base_image``."""
    return f"flagperf-base:{suite}"


def problems() -> list[str]:
    """What this machine lacks to make the image, as short phrases (empty when it can).

    debootstrap needs root (it chroots and makes device nodes), and ``docker import`` a running
    engine reachable by this user.
    """
    found = []
    if os.geteuid() != 0:
        found.append("not root (debootstrap chroots and makes device nodes: run it with sudo)")
    if shutil.which("debootstrap") is None:
        found.append("no debootstrap on PATH (apt-get install debootstrap)")
    if shutil.which("docker") is None:
        found.append("no docker command on PATH (apt-get install docker.io)")
    else:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True)
        if info.returncode != 0:
            found.append(f"no running Docker engine reachable ({_last_line(info.stderr)})")
    return found


def image_exists(name: str) -> bool:
    """Whether the local Docker engine has the image ``name``."""
    return subprocess.run(["docker", "image", "inspect", name],
                          capture_output=True).returncode == 0


def image_size(name: str) -> int:
    """The image's size in bytes (``docker image inspect``'s ``.Size``).

    Raises:
        BaseImageError: the engine does not have it.
    """
    done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", name],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise BaseImageError(f"docker image inspect {name}: {_last_line(done.stderr)}")
    return int(done.stdout.strip())


def complete(rootfs: Path) -> bool:
    """Whether ``rootfs`` holds a finished debootstrap (python3 there, and no ``debootstrap/``
    folder, which debootstrap removes only when it succeeds)."""
    return (rootfs / "usr/bin/python3").exists() and not (rootfs / "debootstrap").exists()


def debootstrap(rootfs: Path, suite: str = DEFAULT_SUITE, mirror: str | None = None,
                log: Path | None = None) -> None:
    """Install a minimal Debian ``suite`` with :data:`PACKAGES` into ``rootfs``.

    Args:
        rootfs: the target folder (created by debootstrap when missing).
        suite: a Debian suite or codename (``bookworm``).
        mirror: the Debian mirror; debootstrap's own default (deb.debian.org) when None.
        log: file that receives debootstrap's output (discarded when None).

    Raises:
        BaseImageError: debootstrap failed; the message holds its last error line.
    """
    argv = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
            suite, str(rootfs)] + ([mirror] if mirror else [])
    with open(log or os.devnull, "w") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        reason = _debootstrap_error(log) if log else f"exit status {done.returncode}"
        raise BaseImageError(f"debootstrap {suite} failed: {reason}"
                             + (f" (its log: {log})" if log else ""))


def docker_import(rootfs: Path, name: str) -> None:
    """``tar -C rootfs -c . | docker import - name``, leaving out :data:`EXCLUDED`.

    Raises:
        BaseImageError: tar or docker import failed.
    """
    with tempfile.TemporaryFile() as tar_stderr:
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner",
                                *(f"--exclude={p}" for p in EXCLUDED), "-c", "."],
                               stdout=subprocess.PIPE, stderr=tar_stderr)
        try:
            done = subprocess.run(["docker", "import", "-", name], stdin=tar.stdout,
                                  capture_output=True, text=True)
        finally:
            tar.stdout.close()
            tar.wait()
        tar_stderr.seek(0)
        tar_error = tar_stderr.read().decode(errors="replace")
    if tar.returncode != 0:
        raise BaseImageError(f"tar of {rootfs} failed: {_last_line(tar_error)}")
    if done.returncode != 0:
        raise BaseImageError(f"docker import {name} failed: {_last_line(done.stderr)}")


def make(name: str, suite: str = DEFAULT_SUITE, mirror: str | None = None,
         rootfs: Path | None = None, say: Callable[[str], None] = lambda line: None) -> Made:
    """Make the base image ``name`` in the local Docker engine, unless it is there already.

    Args:
        name: the image reference to create (``flagperf-base:bookworm``).
        suite: the Debian suite to debootstrap.
        mirror: the Debian mirror (debootstrap's default when None).
        rootfs: a folder kept between calls (a cache): a finished debootstrap there is imported
            again without downloading anything. None: a temporary folder under ``$TMPDIR``
            (default ``/var/tmp``: debootstrap runs programs in it, which a ``noexec`` /tmp
            forbids), removed afterwards.
        say: receives one line per step (what runs, where its log is).

    Returns:
        The image, with the time it took (seconds) and its size (bytes).

    Raises:
        BaseImageError: debootstrap, tar or docker import failed (one line; debootstrap's
            log is kept and named).
    """
    if image_exists(name):
        return Made(name, 0.0, image_size(name), existed=True)
    started = time.monotonic()
    scratch = None
    if rootfs is None:
        scratch = Path(tempfile.mkdtemp(prefix="flagperf-base-", dir=_scratch_root()))
        rootfs = scratch / "rootfs"
    try:
        if not complete(rootfs):
            remove_rootfs(rootfs)
            rootfs.parent.mkdir(parents=True, exist_ok=True)
            handle, name_of_log = tempfile.mkstemp(prefix="flagperf-base-debootstrap-",
                                                   suffix=".log", dir=_scratch_root())
            os.close(handle)
            log = Path(name_of_log)
            say(f"debootstrap {suite} (minbase with {', '.join(PACKAGES)}) from "
                f"{mirror or 'deb.debian.org'} into {rootfs}: some minutes; its log: {log}")
            debootstrap(rootfs, suite, mirror, log)
            log.unlink()  # kept only when it failed, for the user to read
        say(f"docker import {rootfs} as {name}")
        docker_import(rootfs, name)
    finally:
        if scratch is not None:
            remove_rootfs(scratch)
    return Made(name, time.monotonic() - started, image_size(name))


def remove_rootfs(path: Path) -> None:
    """Remove a debootstrap target, first unmounting what an interrupted debootstrap left
    mounted in it (``proc``, ``sys``): a recursive delete must not reach into those.

    Raises:
        BaseImageError: something under ``path`` is still mounted after a lazy unmount.
    """
    if not path.exists():
        return
    root = str(path.resolve())
    mounted = [point for point in _mount_points()
               if point == root or point.startswith(root + "/")]
    for point in sorted(mounted, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
    if any(p == root or p.startswith(root + "/") for p in _mount_points()):
        raise BaseImageError(f"{root}: still has mounts inside; unmount them and remove it")
    shutil.rmtree(path)


def describe(made: Made) -> str:
    """One line for the user: ``NAME: made in 3 min 12 s, 204 MB``."""
    size = f"{made.size_bytes / 1e6:.0f} MB"
    if made.existed:
        return (f"{made.name}: already in the Docker engine ({size}); "
                f"`docker image rm {made.name}` to make it again")
    minutes, seconds = divmod(round(made.seconds), 60)
    took = f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
    return f"{made.name}: made in {took}, {size}"


def _scratch_root() -> str:
    # Not /tmp by default: a tmpfs there may be noexec or too small for ~300 MB.
    return os.environ.get("TMPDIR") or "/var/tmp"


def _mount_points() -> list[str]:
    # /proc/self/mounts escapes spaces and the like as octal (\040).
    with open("/proc/self/mounts") as mounts:
        return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[1])
                for line in mounts if line.strip()]


def _debootstrap_error(log: Path) -> str:
    """debootstrap's last ``E:`` line, else its last line."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E:")]
    return (errors or lines or ["no output"])[-1]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
