"""A case's modules and model for tests. Case folders import as packages (``benchmarks/`` is on
``sys.path``: conftest; the launch sets ``PYTHONPATH`` alike), so a case's module is
``<model>.<framework>.<name>`` and no two cases' ``model`` modules meet."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType, SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]


def case_module(model: str, name: str, framework: str = "pytorch") -> ModuleType:
    """``benchmarks/<model>/<framework>/<name>.py`` as the package module
    ``<model>.<framework>.<name>``."""
    return importlib.import_module(f"{model}.{framework}.{name}")


def case_model(model: str, framework: str = "pytorch") -> ModuleType | SimpleNamespace:
    """The case's ``model.py`` where it has one; else, for a case whose case.yml names a
    library builder, a namespace whose ``build_model`` builds it as the case's driver does:
    ``build_model(config, num_classes, data_dir=None)`` for a classification case,
    ``build_model(config, data_dir=None)`` for a detection case."""
    folder = ROOT / "benchmarks" / model / framework
    if (folder / "model.py").is_file():
        return case_module(model, "model", framework)
    from driver.run import Case

    case = Case.from_folder(folder)
    if case.driver == "driver.torch.detection":
        from driver.torch.detection import build_detector

        return SimpleNamespace(build_model=lambda config, data_dir=None: build_detector(
            case.model.function, config, data_dir))
    return SimpleNamespace(build_model=lambda config, num_classes, data_dir=None:
                           case.build_model(config, data_dir, num_classes=num_classes))


def case_config(model: str, hardware: str = "standard", framework: str = "pytorch") -> dict:
    """The case's configuration on ``hardware``: its standard params, then its profile's (none
    for ``standard``)."""
    from flagperf_ansible.config.cases import load_case, profile_of

    case = load_case(ROOT, model, framework)
    config = dict(case.standard.params)
    profile = profile_of(ROOT, case, hardware)
    if profile:
        config.update(profile[1])
    return config


def torch_finished_keys(metric: str, baselines: bool = False) -> set[str]:
    """The FINISHED keys of a PyTorch training case whose target metric is ``metric``
    (driver/torch/trainer.py: RoundClock's figures, the target's pair, epochs, global_steps,
    world_size; with ``baselines``, a profile's untrained and input-blind scores): what a case
    on another framework must write too."""
    keys = {"e2e_time", "init_time", "raw_train_time", "train_no_eval_time", "pure_compute_time",
            "num_trained_samples", "p_whole", "p_train", "p_core", "converged",
            f"final_{metric}", f"target_{metric}", "epochs", "global_steps", "world_size",
            "core_step_ms_p50", "core_warmup_steps"}
    return keys | ({f"untrained_{metric}", f"blind_{metric}"} if baselines else set())
