"""The results site as a person uses it, in headless Chromium driven over the DevTools
protocol (tests/browser.py ``DevTools``): the leaderboard's rows and ranks, the trend plots and
the regression flag, the filters clicked for real, the link to a run's summary.html.
Screenshots are kept in the test artifacts (``test-artifacts/`` or ``$FLAGPERF_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import pytest

from browser import DevTools, chromium
from flagperf_ansible.cli import main

ROWS = """Array.from(document.querySelectorAll('tr.result')).filter(function (r) {
  return !r.hidden; }).map(function (r) {
  return Array.from(r.cells).map(function (c) { return c.textContent; }); })"""
SHOWN = "document.getElementById('shown').textContent"


@pytest.fixture(scope="module")
def site(tmp_path_factory, results_sources):
    chromium()                               # skipped (a failure in CI) without a browser
    folder = tmp_path_factory.mktemp("site")
    sources = results_sources
    url = f"sqlite:///{folder / 'results.db'}"
    assert main(["results", "ingest", *map(str, sources.values()), "--db", url]) == 0
    assert main(["results", "site", str(folder / "out"), "--db", url]) == 0
    return folder / "out" / "index.html"


@pytest.fixture(scope="module")
def page(site, chromium, tmp_path_factory):
    with DevTools(tmp_path_factory.mktemp("profile"), width=1400, height=1000) as browser:
        browser.open(site.as_uri())
        yield browser


def click_filter(page, facet: str, value: str) -> None:
    page.click(f'#filters input[data-facet="{facet}"][value="{value}"]')


def test_the_leaderboard_shows_every_source_ranked_and_labelled(page, artifacts):
    page.screenshot(artifacts / "results-site.png", full_page=True)
    assert page.evaluate(SHOWN) == "4 of 4 rows shown"
    rows = page.evaluate(ROWS)
    by_chip = {row[2]: row for row in rows}
    # resnet50: our A100 runs and MLPerf's ranked by their own main figures; the cpu profile
    # labelled and not ranked; FlagPerf's bert beside its published figure.
    assert by_chip["A100"][0] in ("1", "1 by p_train images/s")
    assert by_chip["DGXA100"][0] == "1 by p_whole samples/s"
    assert by_chip["cpu"][0] == "profile cpu, not ranked"
    resnet = [r for r in rows if r[4] == "pytorch" and r[2] == "A100" and "p_train" in r[6]]
    assert resnet and resnet[0][10].startswith("0.87 x FlagPerf's A100 1x8: 4586 images/s"), resnet
    assert resnet[0][11] == "2"                               # runs
    bert = [r for r in rows if r[5] == "torch 1.8"]
    assert bert and bert[0][10].startswith("0.98 x FlagPerf's A100 1x8"), bert
    published = page.evaluate("document.querySelectorAll('tr.published').length")
    assert published >= 2


def test_the_trend_shows_the_regression(page):
    trends = page.evaluate("""Array.from(document.querySelectorAll('figure.trend')).map(
      function (f) { var i = f.querySelector('img');
        return [f.querySelector('figcaption').textContent, i ? i.naturalWidth : 0,
                Array.from(f.querySelectorAll('tr.regression')).length]; })""")
    a100 = [t for t in trends if "resnet50-pytorch on nvidia A100 1x8" in t[0]]
    assert a100 and a100[0][0].endswith("1 regression"), trends
    assert a100[0][1] > 300 and a100[0][2] == 1               # the plot drawn, the run flagged
    # A configuration with one run has no trend yet: its row is all there is.
    assert not [t for t in trends if "profile cpu" in t[0] or "DGXA100" in t[0]], trends


def test_the_filters_hide_rows_and_rank_again(page, artifacts):
    click_filter(page, "vendor", "cpu")
    assert page.evaluate(SHOWN) == "3 of 4 rows shown"
    assert "cpu" not in [row[2] for row in page.evaluate(ROWS)]
    click_filter(page, "chip", "A100")
    rows = page.evaluate(ROWS)
    # MLPerf's row is the only one ranked left in resnet50: ranked alone, no "by".
    assert [(row[2], row[0]) for row in rows] == [("DGXA100", "1")]
    assert page.evaluate("document.querySelector('#board-training-bert').hidden") is True
    trends_shown = page.evaluate("""Array.from(document.querySelectorAll('figure.trend'))
      .filter(function (f) { return !f.hidden && !f.closest('[hidden]'); }).length""")
    assert trends_shown == 0                  # the A100 trend went with its chip
    page.screenshot(artifacts / "results-site-filtered.png", full_page=True)
    click_filter(page, "suite", "training")
    assert page.evaluate(SHOWN) == "0 of 4 rows shown"
    assert page.evaluate("document.querySelector('section.suite').hidden") is True
    for facet, value in (("suite", "training"), ("chip", "A100"), ("vendor", "cpu")):
        click_filter(page, facet, value)
    assert page.evaluate(SHOWN) == "4 of 4 rows shown"
    click_filter(page, "software", "torch 1.8")
    assert page.evaluate("document.querySelector('#board-training-bert').hidden") is True
    click_filter(page, "software", "torch 1.8")


def test_a_row_links_to_its_runs_summary(page, site):
    page.click("#board-training-resnet50 tr.ranked a", navigates=True)
    assert page.evaluate("document.querySelector('h1').textContent").startswith(
        "Run run20261102090000")
    assert page.evaluate("location.pathname").startswith(str(site.parent / "runs"))
