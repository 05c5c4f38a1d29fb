"""Every key of every standard configuration, and of nvidia's override files, names its source:
a file and line of upstream FlagPerf, or the reason it is ours (``config/sources.yaml`` beside
each ``standard.yaml``, ``vendors/nvidia/<case>/sources.yaml`` beside its ``config/``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: ``<path>:<line>[-<line>|,<line>] (note)`` in upstream FlagPerf, under one of its suites.
UPSTREAM_LINE = re.compile(r"(training|base|inference)/[^\s:]+\.(py|yaml|sh|md):\d+([-,]\d+)?"
                           r"( \(.+\))?")
OURS = re.compile(r"ours: \S.{9,}")
#: A recipe upstream FlagPerf does not hold: a seed document's, or Megatron-LM's own example.
ELSEWHERE = re.compile(r"(seed \d{3}|Megatron-LM \S+): \S.{9,}")
UPSTREAM = "FlagOpen/FlagPerf@"


def source_problems(keys: list[str], sources: dict, where: str) -> list[str]:
    """What is wrong with ``sources`` (a sources file's mapping) for ``keys``: keys without a
    source, sources of keys that are gone, values in neither form, no ``upstream``."""
    problems = []
    if not str(sources.get("upstream", "")).startswith(UPSTREAM):
        problems.append(f"{where}: upstream: expected {UPSTREAM}<commit>")
    given = sources.get("params") if "params" in sources else sources.get("overrides", {})
    given = given or {}
    problems += [f"{where}: {key}: no source" for key in keys if key not in given]
    problems += [f"{where}: {key}: not a key of the configuration" for key in given
                 if key not in keys]
    for key, value in given.items():
        text = str(value)
        if not (UPSTREAM_LINE.fullmatch(text) or OURS.fullmatch(text)
                or ELSEWHERE.fullmatch(text)):
            problems.append(f"{where}: {key}: {text!r} is neither 'path:line (note)' nor "
                            "'ours: reason'")
    return problems


def standard_configs() -> list[Path]:
    return sorted(ROOT.glob("benchmarks/**/config/standard.yaml"))


def test_the_sources_check_finds_missing_stale_and_malformed_entries():
    sources = {"upstream": "FlagOpen/FlagPerf@1b5a030", "params": {
        "seed": "training/nvidia/bert-pytorch/config/config_A100x1x8.py:19",
        "gone": "training/benchmarks/bert/pytorch/config/_base.py:29 (eval_step)",
        "cache_images": "ours",
        "lr": "FlagPerf's lr"}}
    assert source_problems(["seed", "lr", "max_steps", "cache_images"], sources, "s.yaml") == [
        "s.yaml: max_steps: no source",
        "s.yaml: gone: not a key of the configuration",
        "s.yaml: cache_images: 'ours' is neither 'path:line (note)' nor 'ours: reason'",
        "s.yaml: lr: \"FlagPerf's lr\" is neither 'path:line (note)' nor 'ours: reason'"]
    assert source_problems([], {"params": {}}, "s.yaml") == [
        "s.yaml: upstream: expected FlagOpen/FlagPerf@<commit>"]


@pytest.mark.parametrize("standard", standard_configs(),
                         ids=lambda p: str(p.parent.parent.relative_to(ROOT / "benchmarks")))
def test_every_key_of_a_standard_configuration_has_its_source(standard):
    sources = standard.parent / "sources.yaml"
    assert sources.is_file(), f"{sources.relative_to(ROOT)}: missing"
    keys = list(yaml.safe_load(standard.read_text())["params"])
    assert source_problems(keys, yaml.safe_load(sources.read_text()),
                           str(sources.relative_to(ROOT))) == []


def test_every_key_of_nvidias_override_files_has_its_source():
    checked = 0
    for folder in sorted((ROOT / "vendors/nvidia").glob("*/config")):
        overrides = {path.stem: list(yaml.safe_load(path.read_text()) or {})
                     for path in sorted(folder.glob("*.yaml"))}
        overrides = {hardware: keys for hardware, keys in overrides.items() if keys}
        sources_file = folder.parent / "sources.yaml"
        if not overrides:
            continue
        assert sources_file.is_file(), f"{sources_file.relative_to(ROOT)}: missing"
        sources = yaml.safe_load(sources_file.read_text())
        where = str(sources_file.relative_to(ROOT))
        assert sorted(sources["overrides"]) == sorted(overrides), where
        for hardware, keys in overrides.items():
            assert source_problems(keys, {"upstream": sources["upstream"],
                                          "overrides": sources["overrides"][hardware]},
                                   f"{where}: {hardware}") == []
            checked += len(keys)
    assert checked >= 30  # the nvidia kit's override keys (35 when written)


def test_bert_counts_and_evaluates_in_micro_batches_as_its_sources_say():
    """The issue's case: bert's cadence is FlagPerf's eval_step of micro-batches, not the
    150,000 sequences once attributed to FlagPerf."""
    config = ROOT / "benchmarks/bert/pytorch/config"
    params = yaml.safe_load((config / "standard.yaml").read_text())["params"]
    sources = yaml.safe_load((config / "sources.yaml").read_text())["params"]
    assert (params["step_unit"], params["eval_interval_steps"], params["eval_interval_samples"]
            ) == ("micro_batch", 2000, 0)
    assert sources["eval_interval_steps"].startswith(
        "training/benchmarks/bert/pytorch/config/_base.py:29")
    assert "evaluated every 150,000" not in (config / "standard.yaml").read_text()
