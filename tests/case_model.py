"""A case's modules for tests: every case has a ``model.py`` and a ``run_pretraining.py``, and
several have helpers of the same kind, so each is imported under a name of its own
(``case_<model>_<name>``), never as ``model`` or ``run_pretraining``."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def case_module(model: str, name: str, framework: str = "pytorch") -> ModuleType:
    """``benchmarks/<model>/<framework>/<name>.py``, imported once, with the case folder first on
    ``sys.path`` as its entry point has it (``benchmarks/`` is there already: conftest). The
    case's own modules that it imports (``from model import ...``) are its alone: they are
    taken out of ``sys.modules`` afterwards, so another case's ``model`` is never this one's."""
    folder = ROOT / "benchmarks" / model / framework
    siblings = {path.stem for path in folder.glob("*.py")}
    others = {key: sys.modules.pop(key) for key in siblings if key in sys.modules}
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"case_{model}_{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
        for key in siblings:
            sys.modules.pop(key, None)
        sys.modules.update(others)
    return module


def case_model(model: str, framework: str = "pytorch") -> ModuleType:
    """``benchmarks/<model>/<framework>/model.py``, imported once."""
    return case_module(model, "model", framework)


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
            f"final_{metric}", f"target_{metric}", "epochs", "global_steps", "world_size"}
    return keys | ({f"untrained_{metric}", f"blind_{metric}"} if baselines else set())
