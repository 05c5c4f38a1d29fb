#!/usr/bin/env python3
"""The GPU check's bundle: the controller's Python packages that a GPU node lacks, as wheels
for its Python, and the Ansible collections the roles use, in one folder to copy beside the
checkout; made by the preparing step (``make gpu-bundle``, on a machine that reaches a package
index), installed on the node by ``scripts/gpu_check.py`` (:func:`install_bundle`).

    python3 scripts/gpu_bundle.py [--out gpu-bundle] [--node-packages FILE]
                                  [--python-version 3.12] [--glibc 2.28] [--limit-mib 64]

What it does:

1. the controller's requirements: ``pyproject.toml``'s ``dependencies``, with the ``ansible``
   package (ansible-core and some 100 collections, a 50 MB wheel) replaced by the ansible-core
   it pins (read from the installed ``ansible``'s metadata), and the requirements of the cases
   the check runs that a node lacks (``CHECK_CASES``: gpt's megatron-core);
2. pip resolves their whole closure for that Python on ``manylinux`` x86_64 (``pip install
   --dry-run --report``, binary wheels only: nothing is built on the node), the versions the
   node list states as constraints;
3. every distribution of the closure the node does not have (``--node-packages``: one
   ``name[==version]`` a line, ``pip list --format=freeze`` of the node; default
   ``scripts/gpu_node_packages.txt``, the H100/H200 nodes of the check) is downloaded
   (``pip download --no-deps``, the resolved versions) into ``<out>/wheels/``;
4. what the bundled distributions and the requirements ask of the node's own (e.g.
   ``jinja2>=3.1.0``) is recorded, and checked here against the versions the list states;
5. the collections of ``galaxy.yml``'s ``dependencies`` are copied from the installed
   ``ansible`` package into ``<out>/collections.tar.gz`` (``ansible_collections/<ns>/<name>``);
6. ``<out>/bundle.json`` records all of it, and the folder's size is checked against
   ``--limit-mib`` (64: what may be carried to the node beside the checkout).

On the node, ``scripts/gpu_check.py`` installs it with this module's :func:`install_bundle`
(``pip install --no-index --no-deps --target``, the collections beside the wheels) and
verifies every requirement there before it runs anything. Exit status
0, or 1 with one line saying what failed (no index reachable, a node version that does not
satisfy a requirement, the bundle over the limit).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_NODE_PACKAGES = ROOT / "scripts" / "gpu_node_packages.txt"
MANIFEST = "bundle.json"
WHEELS = "wheels"
COLLECTIONS = "collections.tar.gz"
#: What may travel to the node beside the checkout.
LIMIT_MIB = 64


class BundleError(Exception):
    """What stops the bundle, said in one line."""


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them (``Jinja2`` -> ``jinja2``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_node_packages(path: Path) -> dict[str, str | None]:
    """``{normalized name: version or None}`` from a ``name[==version]`` list (``#`` comments,
    blank lines and ``pip freeze``'s ``name @ url`` lines are read too).

    Raises:
        BundleError: the file is missing or a line is not a name.
    """
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise BundleError(f"{path}: {error.strerror or error}") from None
    packages: dict[str, str | None] = {}
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*([^\s;]+)|@\s*\S+)?", line)
        if not match:
            raise BundleError(f"{path}:{number}: {line!r} is not 'name' or 'name==version'")
        packages[normalize(match.group(1))] = match.group(2)
    return packages


def declared_requirements(project: Path) -> list[str]:
    """The controller's requirements: ``pyproject.toml``'s dependencies."""
    import tomllib

    return tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]


#: The case folders of the GPU check whose own requirements (case.yml) the node lacks: the LLM
#: round's megatron-core, which no GPU node has.
CHECK_CASES = ("benchmarks/gpt/megatron",)


def case_requirements(project: Path) -> list[str]:
    """The ``requirements`` of ``CHECK_CASES``' case.yml files."""
    import yaml

    found: list[str] = []
    for folder in CHECK_CASES:
        spec = yaml.safe_load((project / folder / "case.yml").read_text(encoding="utf-8"))
        found += [r for r in spec.get("requirements") or [] if r not in found]
    return found


def controller_requirements(project: Path) -> list[str]:
    """``pyproject.toml``'s dependencies, ``ansible`` replaced by the ansible-core that the
    installed ``ansible`` requires (e.g. ``ansible-core~=2.19.4``).

    Raises:
        BundleError: ``ansible`` is not installed here (``make install`` first).
    """
    declared = declared_requirements(project)
    try:
        core = [r for r in importlib.metadata.requires("ansible") or []
                if normalize(re.split(r"[ <>=~!;\[]", r, maxsplit=1)[0]) == "ansible-core"]
    except importlib.metadata.PackageNotFoundError:
        raise BundleError("the ansible package is not installed in this Python: make install "
                          "first (its ansible-core pin and collections go into the bundle)") \
            from None
    requirements = []
    for requirement in declared:
        name = normalize(re.split(r"[ <>=~!;\[]", requirement, maxsplit=1)[0])
        requirements.extend(core if name == "ansible" else [requirement])
    return requirements


# -- on a connected machine: making it -------------------------------------------------------

def _platform_args(python_version: str, glibc: str) -> list[str]:
    """pip's options for binary wheels of CPython ``python_version`` on Linux x86_64 with glibc
    ``glibc`` or newer."""
    major, minor = (int(part) for part in glibc.split(".")[:2])
    tags = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    abi = "cp" + python_version.replace(".", "")
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
            "--abi", abi, "--abi", "abi3", "--abi", "none"]
    for tag in tags + ["any"]:
        args += ["--platform", tag]
    return args


def _pip(args: list[str], what: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines()
                 if line.strip() and not line.startswith("WARNING")]
        raise BundleError(f"pip {what} failed: {' '.join(lines[-2:]) or done.returncode}")


def resolve(requirements: list[str], platform: list[str],
            node: dict[str, str | None]) -> list[dict]:
    """The closure of ``requirements`` for the target platform, as pip resolves it with the
    node's stated versions as constraints (so that what is bundled fits what the node has):
    one ``{name, version, requires_dist}`` per distribution.

    Raises:
        BundleError: pip cannot resolve them (no index, no wheel for that Python, a conflict
            with a node version).
    """
    with tempfile.TemporaryDirectory(prefix="gpu-bundle-") as tmp:
        report = Path(tmp) / "report.json"
        constraints = Path(tmp) / "node-constraints.txt"
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in node.items()
                                       if version))
        _pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
              "--target", str(Path(tmp) / "target"), "--constraint", str(constraints),
              *platform, *requirements], "resolve")
        data = json.loads(report.read_text())
    return [{"name": item["metadata"]["name"], "version": item["metadata"]["version"],
             "requires_dist": item["metadata"].get("requires_dist") or []}
            for item in data["install"]]


def node_demands(resolved: list[dict], requirements: list[str], bundled: set[str],
                 python_version: str) -> dict[str, list[str]]:
    """What the requirements and the bundled distributions ask of the node's own:
    ``{name: [specifier, ...]}`` (markers evaluated for ``python_version`` on Linux; extras
    left out)."""
    from packaging.requirements import Requirement

    environment = {"python_version": python_version, "python_full_version": python_version + ".0",
                   "sys_platform": "linux", "platform_system": "Linux",
                   "platform_machine": "x86_64", "os_name": "posix",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython",
                   "extra": ""}
    wanted = list(requirements) + [r for item in resolved if normalize(item["name"]) in bundled
                                   for r in item["requires_dist"]]
    demands: dict[str, list[str]] = {}
    for text in wanted:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        name = normalize(requirement.name)
        if name in bundled:
            continue
        specifiers = demands.setdefault(name, [])
        if str(requirement.specifier) and str(requirement.specifier) not in specifiers:
            specifiers.append(str(requirement.specifier))
    return dict(sorted(demands.items()))


def check_node_versions(demands: dict[str, list[str]], node: dict[str, str | None]) -> list[str]:
    """One line per node distribution whose stated version fails a demand (unstated versions
    are checked on the node)."""
    from packaging.specifiers import SpecifierSet

    problems = []
    for name, specifiers in demands.items():
        version = node.get(name)
        for specifier in specifiers:
            if version is not None and version not in SpecifierSet(specifier):
                problems.append(f"the node's {name} {version} does not satisfy {specifier}")
    return problems


def galaxy_dependencies(project: Path) -> dict[str, str]:
    """``galaxy.yml``'s ``dependencies``: the collections the roles use, with their ranges."""
    import yaml

    return dict(yaml.safe_load((project / "galaxy.yml").read_text()).get("dependencies") or {})


def pack_collections(names: list[str], target: Path) -> dict[str, str]:
    """Copy the installed collections ``names`` (``ns.name``) into the tar ``target`` as
    ``ansible_collections/<ns>/<name>/...`` (caches left out); returns their versions.

    Raises:
        BundleError: one is not installed in this Python.
    """
    import importlib.util

    spec = importlib.util.find_spec("ansible_collections")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    versions = {}
    with tarfile.open(target, "w:gz") as tar:
        for name in names:
            namespace, collection = name.split(".", 1)
            found = [r / namespace / collection for r in roots
                     if (r / namespace / collection / "MANIFEST.json").is_file()]
            if not found:
                raise BundleError(f"collection {name} (galaxy.yml dependencies) is not installed "
                                  "in this Python's ansible package")
            manifest = json.loads((found[0] / "MANIFEST.json").read_text())
            versions[name] = manifest["collection_info"]["version"]
            tar.add(found[0], arcname=f"ansible_collections/{namespace}/{collection}",
                    filter=lambda info: None if "__pycache__" in info.name else info)
    return versions


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def make_bundle(out: Path, node_packages: Path, python_version: str, glibc: str,
                limit_mib: float) -> dict:
    """Write the bundle into ``out`` (module docstring) and return its manifest.

    Raises:
        BundleError: a step failed (see the module docstring).
    """
    started = time.monotonic()
    node = read_node_packages(node_packages)
    requirements = controller_requirements(ROOT) + case_requirements(ROOT)
    platform = _platform_args(python_version, glibc)
    resolved = resolve(requirements, platform, node)
    missing = [item for item in resolved if normalize(item["name"]) not in node]
    bundled = {normalize(item["name"]) for item in missing}
    demands = node_demands(resolved, requirements, bundled, python_version)
    problems = check_node_versions(demands, node)
    if problems:
        raise BundleError("; ".join(problems))
    unlisted = sorted(set(demands) - set(node))
    if unlisted:
        raise BundleError(f"required but neither bundled nor on the node: {', '.join(unlisted)}")

    out.mkdir(parents=True, exist_ok=True)
    wheels = out / WHEELS
    if wheels.is_dir():
        shutil.rmtree(wheels)  # one version of each: two would stop the install
    wheels.mkdir()
    _pip(["download", "--no-deps", "--quiet", "--dest", str(wheels), *platform,
          *[f"{item['name']}=={item['version']}" for item in missing]], "download")
    files = sorted(wheels.glob("*.whl"))
    if len(files) != len(missing):
        raise BundleError(f"pip download wrote {len(files)} wheels for {len(missing)} "
                          "distributions")
    collections = pack_collections(sorted(galaxy_dependencies(ROOT)), out / COLLECTIONS)
    manifest = {
        "python_version": python_version,
        "platform": f"manylinux (glibc {glibc} or newer) x86_64",
        "requirements": requirements,
        "wheels": [{"file": f.name, "bytes": f.stat().st_size,
                    "sha256": hashlib.sha256(f.read_bytes()).hexdigest()} for f in files],
        "collections": collections,
        "node_packages": str(node_packages.relative_to(ROOT) if node_packages.is_relative_to(ROOT)
                             else node_packages),
        "node_demands": demands,
        "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    size = folder_size(out)
    manifest["bytes"] = size
    wheel_bytes = sum(w["bytes"] for w in manifest["wheels"])
    print(f"gpu bundle: {len(files)} wheels ({wheel_bytes / 2**20:.1f} MiB), {len(collections)} "
          f"collections ({(out / COLLECTIONS).stat().st_size / 2**20:.1f} MiB): "
          f"{size / 2**20:.1f} MiB in {out} ({time.monotonic() - started:.0f} s)")
    for wheel in manifest["wheels"]:
        print(f"  {wheel['file']}  {wheel['bytes'] / 2**20:.2f} MiB")
    print(f"  {COLLECTIONS}: " + ", ".join(f"{k} {v}" for k, v in collections.items()))
    print("  relies on the node for: " + ", ".join(
        f"{name}{','.join(spec)}" for name, spec in demands.items()))
    if size > limit_mib * 2**20:
        raise BundleError(f"the bundle is {size / 2**20:.1f} MiB, over the {limit_mib:g} MiB "
                          "that may travel with the checkout")
    return manifest


# -- on the node: installing it ------------------------------------------------------------

def collection_roots() -> list[Path]:
    """Where Ansible finds collections for this Python: ``ansible_collections`` folders on
    ``sys.path``, then the checkout's ``collections/`` and the user's and system's."""
    roots = [Path(p) / "ansible_collections" for p in sys.path if p]
    roots += [ROOT / "collections" / "ansible_collections",
              Path.home() / ".ansible" / "collections" / "ansible_collections",
              Path("/usr/share/ansible/collections/ansible_collections")]
    return [r for r in roots if r.is_dir()]


def missing_collections() -> list[str]:
    """The collections of galaxy.yml that Ansible would not find here."""
    try:
        collections = galaxy_dependencies(ROOT)
    except ImportError:  # no yaml: the bundle brings it, then this is asked again
        return ["the collections of galaxy.yml"]
    roots = collection_roots()
    return [name for name in collections
            if not any((r / name.replace(".", "/", 1) / "MANIFEST.json").is_file()
                       for r in roots)]


def install_bundle(bundle: Path, site: Path) -> str:
    """Install the bundle's wheels and collections into ``site`` (where ``site/.bundle.json``
    says another bundle, or none, was installed) and put it first on ``sys.path``, ``PATH``
    and ``PYTHONPATH``; returns what was done.

    Raises:
        BundleError: no bundle, pip failed, or a requirement is not met afterwards (the
            message names it, and how to make a bundle that meets it).
    """
    manifest_file = bundle / MANIFEST
    if not manifest_file.is_file():
        raise BundleError(f"no bundle at {bundle} ({MANIFEST} missing): make gpu-bundle on a "
                          "machine with a package index, and copy gpu-bundle/ beside the checkout")
    manifest = manifest_file.read_text()
    stamp = site / ".bundle.json"
    done = "reused: installed earlier from the same bundle"
    if not (stamp.is_file() and stamp.read_text() == manifest):
        if site.exists():
            shutil.rmtree(site)
        wheels = sorted((bundle / WHEELS).glob("*.whl"))
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
             "--quiet", "--disable-pip-version-check", "--target", str(site),
             *map(str, wheels)], capture_output=True, text=True)
        if pip.returncode != 0:
            lines = [line for line in pip.stderr.splitlines() if line.strip()]
            raise BundleError(f"pip install of the bundle failed: {' '.join(lines[-2:])}")
        if (bundle / COLLECTIONS).is_file():
            with tarfile.open(bundle / COLLECTIONS) as tar:
                tar.extractall(site, filter="data")
        stamp.write_text(manifest)
        done = f"{len(wheels)} wheels and the collections into {site}"
    activate(site)
    problems = unmet_requirements(bundle_requirements(json.loads(manifest)["requirements"], site))
    if problems:
        raise BundleError("after installing the bundle: " + "; ".join(p for _, p in problems[:5]))
    return done


def activate(site: Path) -> None:
    """``site`` first on this process's ``sys.path`` and on its children's ``PYTHONPATH``,
    its scripts (``ansible-playbook``) first on ``PATH``."""
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    os.environ["PATH"] = os.pathsep.join((str(site / "bin"), os.environ.get("PATH", "")))


def unmet_requirements(wanted: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each ``(requirement, who needs it)`` that the distributions this Python sees (in
    ``sys.path`` order: the first of a name counts) do not meet: ``(name, one line why)``.

    Raises:
        BundleError: ``packaging`` does not import (needed to read the requirements).
    """
    try:
        from packaging.requirements import Requirement
    except ImportError:
        raise BundleError("the packaging module does not import: it is needed to check the "
                          "controller's requirements") from None
    importlib.invalidate_caches()
    installed: dict[str, Any] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            installed.setdefault(normalize(name), dist)
    problems = []
    for text, who in wanted:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        dist = installed.get(normalize(requirement.name))
        if dist is None:
            problems.append((requirement.name, f"{requirement.name} (needed by {who}) is "
                                               "neither on this node nor in the bundle"))
        elif not requirement.specifier.contains(dist.version, prereleases=True):
            problems.append((requirement.name, (
                f"{requirement.name} {dist.version} does not satisfy {requirement.specifier} "
                f"(needed by {who}): make the bundle with this node's pip list "
                "--format=freeze (make gpu-bundle NODE=FILE)")))
    return problems


def bundle_requirements(requirements: list[str], site: Path) -> list[tuple[str, str]]:
    """The bundle's requirements (the controller's, as the bundle resolved them) and those of
    every distribution installed in ``site``, each with who needs it."""
    wanted = [(text, "the controller") for text in requirements]
    for dist in importlib.metadata.distributions(path=[str(site)]):
        wanted += [(text, dist.metadata["Name"]) for text in dist.requires or []]
    return wanted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-bundle",
                        help="the bundle's folder (default: gpu-bundle in the checkout)")
    parser.add_argument("--node-packages", type=Path, default=DEFAULT_NODE_PACKAGES,
                        metavar="FILE", help="the node's distributions, 'name[==version]' a line "
                        "(pip list --format=freeze there; default: %(default)s)")
    parser.add_argument("--python-version", default="3.12", help="the node's Python (3.12)")
    parser.add_argument("--glibc", default="2.28",
                        help="the newest glibc wheels may need (the node's or older; 2.28)")
    parser.add_argument("--limit-mib", type=float, default=LIMIT_MIB,
                        help="the most the bundle may weigh (MiB; default %(default)s)")
    args = parser.parse_args(argv)
    try:
        make_bundle(args.out.resolve(), args.node_packages.resolve(), args.python_version,
                    args.glibc, args.limit_mib)
    except BundleError as error:
        print(f"gpu bundle: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
