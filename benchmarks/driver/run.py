"""The one entry of every case whose case.yml names a ``driver``:

    python -m driver.run --case <case folder> --config FILE --output_dir DIR [--data_dir DIR]

with ``benchmarks/`` on ``PYTHONPATH`` (the launch sets it: flagperf_ansible.config.launchers),
so that the driver package and every case folder import as packages (``bert.pytorch.model``)
and no case edits ``sys.path``. It reads the case folder's ``case.yml`` for ``driver`` and
``model``, imports the driver module (``driver.torch.classification``, or the case's own such
as ``bert.pytorch.training``) and ends the process with the status of its ``run(case)``
(0: trained to the end). The controller validated case.yml before any host was touched
(flagperf_ansible.config.case_schema); this reads the two keys it needs.
"""

from __future__ import annotations

import argparse
import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml


def import_object(path: str) -> Any:
    """The object at a dotted import path: ``package.module.name``, or a module.

    Raises:
        ImportError: no such module or no such name in it (the message names the path).
    """
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as error:
        module, _, name = path.rpartition(".")
        if not module or not path.startswith(str(error.name)):
            raise
    try:
        return getattr(importlib.import_module(module), name)
    except AttributeError:
        raise ImportError(f"{path}: module {module} has no {name!r}") from None


@dataclass(frozen=True)
class ModelBuilder:
    """case.yml's ``model``: ``builder`` (an import path) and ``arguments`` (builder keyword
    -> configuration key, or a list of keys for a list of their values; None: the case's own
    builder, which takes the configuration itself)."""

    builder: str
    arguments: Mapping[str, str | list[str]] | None = None

    @functools.cached_property
    def function(self) -> Callable[..., Any]:
        """The builder itself (imported on first use)."""
        return import_object(self.builder)

    def keywords(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """``arguments`` with the configuration's values; a key missing or null in
        ``config`` leaves the builder's default (the keyword is left out)."""
        keywords = {}
        for keyword, keys in (self.arguments or {}).items():
            if isinstance(keys, str):
                if config.get(keys) is not None:
                    keywords[keyword] = config[keys]
            elif all(config.get(key) is not None for key in keys):
                keywords[keyword] = [config[key] for key in keys]
        return keywords

    def build(self, config: Mapping[str, Any], data_dir: Path | None = None, **extra: Any) -> Any:
        """The model: ``builder(**keywords(config), **extra)`` for a library builder (with
        ``arguments``), else ``builder(config, data_dir=data_dir, **extra)`` (the case's own
        ``model.py``). ``extra``: what the driver knows from the data (``num_classes``)."""
        if self.arguments is not None:
            return self.function(**self.keywords(config), **extra)
        return self.function(config, data_dir=data_dir, **extra)


@dataclass(frozen=True)
class Case:
    """The case being run, as its folder and case.yml say: ``name`` (its model folder, e.g.
    ``resnet50``), ``framework``, ``package`` (its folder as a package, e.g.
    ``inference.resnet50.pytorch``), ``description``, the target's ``metric`` (without
    ``final_``) and ``config_key``, and ``model`` (None where case.yml names none)."""

    directory: Path
    name: str
    framework: str
    package: str
    description: str
    driver: str
    metric: str | None = None
    config_key: str | None = None
    model: ModelBuilder | None = None

    @classmethod
    def from_folder(cls, directory: Path) -> "Case":
        """Read ``<directory>/case.yml``.

        Raises:
            SystemExit: the folder is not under a ``benchmarks/`` (the folder holding the
                driver package, this one's or a checkout copy's) or has no case.yml with a
                ``driver``.
        """
        directory = Path(directory).resolve()
        root = next((p for p in directory.parents if (p / "driver" / "run.py").is_file()), None)
        if root is None:
            raise SystemExit(f"--case {directory}: not a case folder under a benchmarks/ "
                             "folder (the one holding driver/)")
        path = directory / "case.yml"
        try:
            spec = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as error:
            raise SystemExit(f"--case {directory}: {error}") from None
        if not isinstance(spec, dict) or not spec.get("driver"):
            raise SystemExit(f"{path}: no driver (the module that runs the case)")
        target = spec.get("target") or {}
        metric = target.get("metric")
        model = spec.get("model")
        return cls(directory=directory, name=directory.parent.name, framework=directory.name,
                   package=".".join(directory.relative_to(root).parts),
                   description=str(spec.get("description", "")).strip(),
                   driver=str(spec["driver"]),
                   metric=metric.removeprefix("final_") if metric else None,
                   config_key=target.get("config_key"),
                   model=ModelBuilder(str(model["builder"]), model.get("arguments"))
                   if model else None)

    def build_model(self, config: Mapping[str, Any], data_dir: Path | None = None,
                    **extra: Any) -> Any:
        """The model case.yml names (``ModelBuilder.build``).

        Raises:
            ValueError: case.yml names no model.
        """
        if self.model is None:
            raise ValueError(f"{self.directory}/case.yml: no model (builder) for the driver")
        return self.model.build(config, data_dir, **extra)


def case_argument() -> Path:
    """``--case`` of this process's command line (the other arguments are the driver's:
    ``driver.case_io.parse_case_args``)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--case", required=True, type=Path)
    return parser.parse_known_args()[0].case


def main() -> int:
    case = Case.from_folder(case_argument())
    return import_object(case.driver).run(case)


if __name__ == "__main__":
    from driver.dist import exit_rank

    exit_rank(main())
