"""The results database, on SQLite and on a real PostgreSQL server through the same tests:
the three sources ingested (a run of this project, a FlagPerf results folder, MLPerf logs),
a run stored once however often and however concurrently it is ingested, broken runs refused
in one line with nothing stored, the migrations in step with the schema, and the site served.
The sources are written once per module by the real writers (tests/results_sources.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from flagperf_ansible.cli import main
from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.results.db import schema
from flagperf_ansible.results.db.engine import HEAD, alembic_config, connect, migrate, writing
from flagperf_ansible.results.db.query import load
from flagperf_ansible.results.db.records import read_run
from flagperf_ansible.results.leaderboard import leaderboard
from flagperf_ansible.results.mlperf_import import describe_log
from interrupt import interrupt

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def sources(results_sources) -> dict[str, Path]:
    return results_sources


def ingest(url: str, *paths: Path) -> int:
    return main(["results", "ingest", *map(str, paths), "--db", url])


def counts(url: str) -> dict[str, int]:
    with connect(url).connect() as connection:
        return {table.name: connection.execute(select(func.count()).select_from(table)).scalar()
                for table in schema.metadata.sorted_tables}


def test_three_sources_ingest_and_the_leaderboard_shows_them(database_url, sources, capsys):
    assert ingest(database_url, *sources.values()) == 0
    printed = capsys.readouterr().out
    assert printed.count(": stored (") == 5, printed
    data = load(connect(database_url))
    by_source = {}
    for result in data["results"]:
        by_source.setdefault(result["source"], []).append(result)
    assert {k: len(v) for k, v in by_source.items()} == {"flagperf-ansible": 3, "flagperf": 1,
                                                        "mlperf": 1}

    # Our runs: the figures with their units and directions; hosts masked.
    a100 = [r for r in by_source["flagperf-ansible"] if r["chip"] == "A100"]
    assert [r["run_id"] for r in a100] == ["run20261102090000", "run20261109090000"]
    figures = a100[0]["figures"]
    assert (figures["p_train"]["unit"], figures["p_train"]["direction"]) == ("images/s", 1)
    assert (figures["e2e_time"]["unit"], figures["e2e_time"]["direction"]) == ("s", -1)
    assert len(figures["p_train"]["values"]) == 3
    assert a100[0]["vendor"] == "nvidia" and a100[0]["profile"] is None
    cpu = next(r for r in by_source["flagperf-ansible"] if r["vendor"] == "cpu")
    assert cpu["profile"] == "cpu" and "not the standard configuration" in cpu["profile_label"]
    with connect(database_url).connect() as connection:
        labels = set(connection.execute(select(schema.hosts.c.label)).scalars())
        reasons = list(connection.execute(select(schema.rounds.c.reason)).scalars())
    assert labels == {"host0"} and not any("h1" in (r or "") for r in reasons)

    # FlagPerf's folder: vendor from its monitor log, framework version from the case key,
    # FlagPerf's alias mapped; its published figures from the catalog.
    flagperf = by_source["flagperf"][0]
    assert (flagperf["vendor"], flagperf["model"], flagperf["framework"], flagperf["software"],
            flagperf["chip"], flagperf["nnodes"], flagperf["nproc_per_node"]) == (
        "nvidia", "bert", "pytorch", "torch 1.8", "A100", 1, 8)
    assert flagperf["figure"] == "p_whole"
    assert sum(flagperf["figures"]["p_whole"]["values"]) / 2 == pytest.approx(579.25)
    assert any((p["model"], p["hardware"], p["nproc_per_node"]) == ("bert", "A100", 8)
               for p in data["published"])

    # MLPerf: time to train from run_start to run_stop, samples from epochs x train_samples.
    mlperf = by_source["mlperf"][0]
    assert (mlperf["model"], mlperf["vendor"], mlperf["chip"], mlperf["nnodes"],
            mlperf["status"]) == ("resnet50", "nvidia", "DGXA100", 1, "passed")
    assert mlperf["figures"]["raw_train_time"]["values"] == pytest.approx([1680.0, 1716.0])
    assert mlperf["figures"]["p_whole"]["values"][0] == pytest.approx(35 * 1281167 / 1680.0)
    assert (mlperf["metric"], mlperf["target"]) == ("final_eval_accuracy", 0.759)

    boards = {b["model"]: b for b in leaderboard(data)}
    assert set(boards) == {"bert", "resnet50"}
    rows = boards["resnet50"]["rows"]
    assert [(r["kind"], r["vendor"], r["chip"], r["framework"]) for r in rows] == [
        ("ranked", "nvidia", "A100", "pytorch"), ("ranked", "nvidia", "DGXA100", "-"),
        ("profile", "cpu", "cpu", "pytorch")]
    best = rows[0]
    # The best of the two A100 runs is the faster one, set beside FlagPerf's A100 1x8.
    assert best["result"]["run_id"] == "run20261102090000" and best["runs"] == 2
    assert best["ratio"] == pytest.approx(best["value"] / 4586.0)
    assert rows[2]["ratio"] is None and rows[2]["reference_text"] == ""   # 1x1: none published
    assert boards["bert"]["rows"][0]["ratio"] == pytest.approx(579.25 / 589)
    (series,) = [s for s in boards["resnet50"]["series"] if s["chip"] == "A100"]
    verdict = series["points"][1]["verdict"]
    assert (verdict["verdict"], verdict["confirmed"]) == ("regression", True)
    assert verdict["change_pct"] < -10


def test_a_run_is_stored_once_however_often_and_however_concurrently(database_url, sources,
                                                                    capsys):
    """Two ingests at once into an empty database (both migrate, both store a100_2), then the
    same run again: every run once, every table as one ingest of each leaves it."""
    command = [sys.executable, "-m", "flagperf_ansible", "results", "ingest", "--db",
               database_url]
    first = subprocess.Popen([*command, str(sources["a100_2"]), str(sources["cpu"])],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen([*command, str(sources["flagperf"]), str(sources["a100_2"])],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = [process.communicate(timeout=300) for process in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    said = "".join(out for out, _ in outputs)
    assert said.count("run20261109090000: stored") + said.count(
        "run20261109090000: unchanged") == 2 and said.count("run20261109090000: stored") == 1
    after_both = counts(database_url)

    expected = {"runs": 3, "rounds": 3 + 1 + 2, "results": 3, "cases": 2}
    assert {k: after_both[k] for k in expected} == expected
    records = [read_run(sources[name]) for name in ("a100_2", "cpu", "flagperf")]
    assert after_both["figures"] == sum(len(r["figures"]) for record in records
                                        for result in record["results"]
                                        for r in result["rounds"])
    assert after_both["published"] == len({
        (p["model"], p["framework"], p["vendor"], p["hardware"], p["nnodes"], p["nproc_per_node"])
        for record in records for p in record["published"]})

    capsys.readouterr()
    assert ingest(database_url, sources["a100_2"], sources["flagperf"]) == 0
    assert capsys.readouterr().out.count(": unchanged (") == 2
    assert counts(database_url) == after_both


def test_a_run_ingested_again_with_more_rounds_replaces_the_earlier(database_url, sources,
                                                                   tmp_path, capsys):
    run = shutil.copytree(sources["a100_1"], tmp_path / "run20261102090000")
    # The run as it was after two rounds (its plan asks for three): the third not begun.
    shutil.move(run / "c-pytorch-cpux1x1" / "round3", tmp_path / "round3")
    assert ingest(database_url, run) == 0
    assert counts(database_url)["rounds"] == 2
    shutil.move(tmp_path / "round3", run / "c-pytorch-cpux1x1" / "round3")
    assert ingest(database_url, run) == 0
    assert "replaced" in capsys.readouterr().out
    assert (counts(database_url)["runs"], counts(database_url)["rounds"]) == (1, 3)


def _refused(url: str, capsys, *paths: Path) -> str:
    assert ingest(url, *paths) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error, error
    return error


def test_broken_or_half_written_runs_are_refused_in_one_line(database_url, sources, tmp_path,
                                                            capsys):
    good = sources["a100_1"]
    in_flight = shutil.copytree(good, tmp_path / "in_flight")
    (in_flight / "c-pytorch-cpux1x1" / "round2" / "round.json").unlink()
    error = _refused(database_url, capsys, good, in_flight)
    assert "in_flight/c-pytorch-cpux1x1/round2/round.json: this round began" in error

    cut = shutil.copytree(good, tmp_path / "cut")
    document = cut / "c-pytorch-cpux1x1" / "round1" / "round.json"
    document.write_text(document.read_text()[:200])
    assert "round1/round.json: not readable JSON" in _refused(database_url, capsys, cut)

    foreign = shutil.copytree(good, tmp_path / "foreign")
    document = foreign / "c-pytorch-cpux1x1" / "round1" / "round.json"
    content = json.loads(document.read_text())
    content["status"] = "done"
    document.write_text(json.dumps(content))
    error = _refused(database_url, capsys, foreign)
    assert "round1/round.json: status: does not match schemas/round.schema.json" in error

    logs = shutil.copytree(sources["mlperf"], tmp_path / "mlperf")
    log = logs / "result_1.txt"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-1]))
    assert "result_1.txt: no run_stop record" in _refused(database_url, capsys, logs)
    log.write_text("".join(lines[:-1]) + lines[-1][:60])
    assert f"result_1.txt: line {len(lines)}: an :::MLLOG record that does not parse" in \
        _refused(database_url, capsys, logs)

    # The good run given beside the broken ones was not stored either.
    migrate(connect(database_url))
    assert counts(database_url)["runs"] == 0


def test_the_migrations_make_the_schema_and_refuse_an_unknown_revision(database_url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    engine = connect(database_url)
    assert migrate(engine) == HEAD
    assert ScriptDirectory.from_config(alembic_config(database_url)).get_current_head() == HEAD
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), schema.metadata) == []
    with writing(engine) as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(ConfigError, match="schema revision 9999, which this flagperf-ansible "
                                          "does not know"):
        migrate(engine)


def test_mlperf_log_figures_and_samples_count(sources, tmp_path):
    described = describe_log(sources["mlperf"] / "result_0.txt")
    assert (described["benchmark"], described["org"], described["platform"]) == (
        "resnet", "NVIDIA", "1xDGXA100")
    finished = described["finished"]
    assert finished["raw_train_time"] == pytest.approx(28 * 60)
    assert finished["init_time"] == pytest.approx(60) and finished["e2e_time"] == pytest.approx(
        28 * 60 + 60)
    assert finished["final_eval_accuracy"] == pytest.approx(0.76)
    assert finished["converged"] is True and finished["target_eval_accuracy"] == 0.759
    # A run_stop with samples_count (as BERT's logs have it) counts those samples; a status
    # other than success did not converge.
    text_log = (sources["mlperf"] / "result_0.txt").read_text().replace(
        '"status": "success"', '"status": "aborted", "samples_count": 1000')
    (tmp_path / "bert.txt").write_text(text_log.replace('"value": "resnet"', '"value": "bert"'))
    other = describe_log(tmp_path / "bert.txt")["finished"]
    assert other["num_trained_samples"] == 1000 and other["converged"] is False
    assert other["p_whole"] == pytest.approx(1000 / (28 * 60))


def test_serve_serves_the_site_until_interrupted(sources, tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    # No database yet: refused in one line, nothing made.
    assert main(["results", "site", str(tmp_path / "site"), "--db", url]) == 2
    assert "results.db: no such database" in capsys.readouterr().err
    assert not (tmp_path / "results.db").exists() and not (tmp_path / "site").exists()
    assert ingest(url, sources["a100_1"]) == 0
    process = subprocess.Popen([sys.executable, "-m", "flagperf_ansible", "results", "serve",
                                "--db", url, "--port", "0", "--out", str(tmp_path / "site")],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("serving "), line + process.stderr.read()
        address = line.split(" on ")[1].split(" ")[0]
        assert address.startswith("http://127.0.0.1:")
        page = urllib.request.urlopen(address, timeout=30).read().decode()
        assert "flagperf-ansible results" in page and "run20261102090000" in page
        link = page.split('href="runs/')[1].split('"')[0]
        summary = urllib.request.urlopen(f"{address}runs/{link}", timeout=30).read().decode()
        assert "<h1>Run run20261102090000" in summary
    finally:
        out, err, stopped = interrupt(process, 30)
    assert stopped, f"SIGINT left results serve running for 30 s: {err[-2000:]}"
    assert process.returncode == 0, err
    assert out.strip().endswith("stopped")
