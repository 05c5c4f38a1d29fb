"""summary.html laid out by headless Chromium at 1400 px: the overview first, no table wider
than the page, the monitor timelines folded (tests/browser.py). The 30-case page of the local
run is measured in tests/test_local_run.py."""

import csv

from browser import page_metrics, screenshot
from flagperf_ansible.results.report import write_summary
from run_outputs import CASE, CPU_PROFILE, make_run
from test_monitoring import SYS


def monitor_files(node_dir, seconds=12):
    """A node's system monitor samples, one a second, as sys_monitor.py writes them."""
    start = int((node_dir.parent / "round_start.json").stat().st_mtime * 1000)
    with open(node_dir / "sys_monitor.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SYS)
        for i in range(seconds):
            writer.writerow([start + 1000 * i, 50 + i, 1.5, 2e9 + 1e7 * i, 8e9, 25, 0, 1e5 * i,
                             0, 0, "", 0.1])


def test_the_page_opens_on_the_overview_and_fits_1400_px(chromium, tmp_path):
    run = make_run(tmp_path / "run", [10.0, 11.0], profile=CPU_PROFILE)
    for number in (1, 2):
        node = run / CASE / f"round{number}" / "h1_noderank0"
        (node.parent / "round_start.json").touch()
        monitor_files(node)
    write_summary(run)
    page = run / "summary.html"
    metrics = page_metrics(page, tmp_path)
    assert metrics["h2"][0] == "Overview", metrics["h2"]
    assert metrics["widest_table_right"] <= metrics["viewport"], metrics
    # The throughput plot is shown; the two monitor timelines are a click away.
    assert metrics["shown_images"] == ["throughput per round"], metrics
    assert metrics["folded_images"] == 2, metrics
    shot = screenshot(page, tmp_path / "summary.png", height=1200)
    print(f"screenshot: {shot}")
