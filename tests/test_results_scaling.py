"""The scaling efficiency of an LLM case in the results database: runs of gpt at 1, 2 and 8
chips ingested into a SQLite file, ``db.query.scaling`` over them, and its table on the site."""

from __future__ import annotations


import pytest

from flagperf_ansible.cli import main
from flagperf_ansible.results.db.engine import connect
from flagperf_ansible.results.db.query import load, scaling
from flagperf_ansible.results.leaderboard import leaderboard, site_html
from llm_runs import SP, llm_run

BF16 = {**SP, "precision": "bf16"}


@pytest.fixture
def data(tmp_path) -> dict:
    older = llm_run(tmp_path / "run20261101090000", [
        ("gpt-megatron-A100x1x8", 8, 40000.0, 0, SP)], created="2026-11-01T09:00:00+0000")
    newer = llm_run(tmp_path / "run20261201090000", [
        ("gpt-megatron-A100x1x1", 1, 6000.0, 0, SP),
        ("gpt-megatron-A100x1x1", 1, 6400.0, 0, SP),       # two rounds: their mean counts
        ("gpt-megatron-A100x1x2", 2, 11000.0, 0, SP),
        ("gpt-megatron-A100x1x2", 2, None, 1, SP),         # a failed round counts for nothing
        ("gpt-megatron-A100x1x8", 8, 38400.0, 0, SP)], created="2026-12-01T09:00:00+0000")
    single = llm_run(tmp_path / "run20261202090000", [     # bf16 at one chip count only
        ("gpt-megatron-A100x1x1", 1, 9000.0, 0, BF16)], created="2026-12-02T09:00:00+0000")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    assert main(["results", "ingest", str(older), str(newer), str(single), "--db", url]) == 0
    return load(connect(url))


def test_scaling_efficiency_per_chip_count_from_the_latest_run(data):
    (entry,) = scaling(data)
    assert (entry["model"], entry["framework"], entry["vendor"], entry["chip"],
            entry["precision"], entry["profile"]) == ("gpt", "megatron", "nvidia", "A100",
                                                       "fp32", None)
    points = entry["points"]
    assert [(p["chips"], p["rounds"]) for p in points] == [(1, 2), (2, 1), (8, 1)]
    per_chip = [p["per_chip"] for p in points]
    assert per_chip == pytest.approx([6200.0, 5500.0, 4800.0])
    assert [p["total"] for p in points] == pytest.approx([6200.0, 11000.0, 38400.0])
    assert [p["efficiency"] for p in points] == pytest.approx([1.0, 5500 / 6200, 4800 / 6200])
    # 8 chips: the latest run (December), not the faster older one.
    assert points[2]["result"]["run_id"] == "run20261201090000"


def test_the_site_shows_a_scaling_table_per_case(data):
    (board,) = leaderboard(data)
    assert len(board["scaling"]) == 1
    page = site_html(data, {})
    assert "Scaling: gpt-megatron on nvidia A100, fp32" in page
    assert "<td>8 (1x8)</td><td>4800</td><td>38400</td><td>77.4 %</td>" in page
    assert "bf16" not in page.split("Scaling:")[1].split("</figure>")[0]
