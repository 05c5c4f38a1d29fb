"""Round monitor summaries from monitor CSVs written here: energy, energy per unit of work,
the monitoring window of each suite, coverage, a stream that stops early. The rows are
synthetic (exact figures to check the formulas)."""

import csv
import json

import pytest

from flagperf_ansible.results.monitoring import event_window, integrate_energy, summarize_round

SYS = ["timestamp_ms", "cpu_percent", "load1", "mem_used_bytes", "mem_total_bytes", "mem_percent",
       "disk_read_Bps", "disk_write_Bps", "net_recv_Bps", "net_sent_Bps", "host_power_w",
       "other_cpu_cores"]
DEV = ["timestamp_ms", "index", "util_percent", "mem_used_bytes", "mem_total_bytes", "power_w",
       "temp_c", "clock_mhz", "other_processes"]
T0 = 1_700_000_000_000


def write(path, header, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def node(round_dir, name, seconds, device_power, host_power="", status="stopped", load=1.0,
         cores=None, other_cores="", other_processes=""):
    """A node dir sampled every second from T0 over ``seconds`` s, two devices; with ``cores``,
    its sys_info.json says so; ``other_cores`` and ``other_processes`` are what the processes
    that ran before the round used (empty: not measured)."""
    path = round_dir / name
    path.mkdir(parents=True)
    stamps = [T0 + 1000 * i for i in range(seconds + 1)]
    write(path / "sys_monitor.csv", SYS,
          [[t, 50.0, load, 4e9 + i, 8e9, 50.0, 0, 0, 0, 0, host_power, other_cores]
           for i, t in enumerate(stamps)])
    if cores:
        (path / "sys_info.json").write_text(json.dumps({"cpu": {"logical_cores": cores}}))
    write(path / "device_monitor.csv", DEV,
          [[t, d, 90.0 + d, 1e9 * (d + 1), 8e10, device_power, 60, 1980, other_processes]
           for t in stamps for d in (0, 1)])
    (path / "monitor.json").write_text(json.dumps({
        "status": status, "interval_s": 1.0, "host_power_source": "ipmi" if host_power else
        "not available", "stopped_ms": stamps[-1] + 500,
        "device_info": {"vendor": "nvidia", "devices": [{"index": 0, "name": "H100"},
                                                         {"index": 1, "name": "H100"}]}}))


def events(start_ms, end_ms, window=("TRAIN_START", "TRAIN_END")):
    return [{"event": window[0], "metadata": {"time_ms": start_ms}},
            {"event": window[1], "metadata": {"time_ms": end_ms}}]


def test_trapezoid_energy_with_interpolated_ends():
    assert integrate_energy([(0, 300.0), (1000, 300.0), (2000, 300.0)], 0, 2000, 0) == 600.0
    # Ramp 100 -> 300 W over 2 s; window 0.5..1.5 s: mean 200 W for 1 s.
    assert integrate_energy([(0, 100.0), (1000, 200.0), (2000, 300.0)], 500, 1500, 0) == \
        pytest.approx(200.0)
    assert integrate_energy([(1500, 100.0)], 0, 2000, 1000) is None   # does not cover the start


def test_the_window_spans_all_ranks():
    assert event_window([events(T0 + 2000, T0 + 8000), events(T0 + 1900, T0 + 8100)]) == \
        (T0 + 1900, T0 + 8100)
    assert event_window([[{"event": "TRAIN_START", "metadata": {"time_ms": 5}}]]) == (5, None)
    inference = ("INFERENCE_START", "INFERENCE_END")
    assert event_window([events(T0, T0 + 10, inference)], inference) == (T0, T0 + 10)
    assert event_window([events(T0, T0 + 10, inference)]) == (None, None)


def test_energy_per_sample_over_two_nodes(tmp_path):
    node(tmp_path, "a_noderank0", 10, 500.0, host_power=1000.0)
    node(tmp_path, "b_noderank1", 10, 250.0, host_power=1000.0)
    summary = summarize_round(tmp_path, ["a_noderank0", "b_noderank1"],
                              [events(T0 + 2000, T0 + 6000)], {"num_trained_samples": 1000})
    assert summary["status"] == "ok" and summary["window"]["source"] == "perflog"
    a = summary["nodes"]["a_noderank0"]
    assert a["covers_train"] and a["devices"]["energy_j"] == pytest.approx(2 * 500 * 4)
    assert a["devices"]["per_device"][1]["util_percent_mean"] == 91.0
    overall = summary["overall"]
    # 4 devices: 2 x 500 W + 2 x 250 W = 1500 W over 4 s = 6000 J, for 1000 samples.
    assert overall["device_power_w_mean"] == 1500.0
    assert overall["device_energy_j"] == pytest.approx(6000.0)
    assert overall["energy_per_sample_j"] == pytest.approx(6.0)
    assert overall["host_energy_per_sample_j"] == pytest.approx(2 * 1000 * 4 / 1000)
    assert overall["device_mem_used_peak_bytes"] == 2_000_000_000


def test_unknown_power_gives_no_energy_and_says_not_available(tmp_path):
    node(tmp_path, "a_noderank0", 5, "")
    summary = summarize_round(tmp_path, ["a_noderank0"], [events(T0 + 1000, T0 + 4000)],
                              {"num_trained_samples": 10})
    assert summary["nodes"]["a_noderank0"]["host_power"] == "not available"
    assert summary["overall"]["energy_per_sample_j"] is None
    assert summary["overall"]["host_power"] == "not available"


def test_stream_that_ends_long_before_the_round_is_a_dead_monitor(tmp_path):
    node(tmp_path, "a_noderank0", 3, 100.0)            # samples stop at T0 + 3 s
    info = json.loads((tmp_path / "a_noderank0/monitor.json").read_text())
    info["stopped_ms"] = T0 + 60_000                   # ...but the monitor was stopped at 60 s
    (tmp_path / "a_noderank0/monitor.json").write_text(json.dumps(info))
    summary = summarize_round(tmp_path, ["a_noderank0"], [events(T0, T0 + 50_000)], None)
    assert summary["status"] == "died"
    assert "before the round did" in summary["nodes"]["a_noderank0"]["detail"]
    assert not summary["nodes"]["a_noderank0"]["covers_train"]


def test_node_without_monitor_files_is_missing(tmp_path):
    (tmp_path / "a_noderank0").mkdir()
    assert summarize_round(tmp_path, ["a_noderank0"], [], None)["status"] == "missing"


def test_an_inference_round_is_measured_over_its_window_per_query(tmp_path):
    node(tmp_path, "a_noderank0", 10, 500.0, host_power=1000.0)
    window = ("INFERENCE_START", "INFERENCE_END")
    # A training window is in the log too (warm-up, say): the contract's window is the one used.
    logged = events(T0 + 1000, T0 + 9000) + events(T0 + 2000, T0 + 4000, window)
    summary = summarize_round(tmp_path, ["a_noderank0"], [logged], {"num_queries": 400},
                              window=window, throughput={"unit": "queries", "count": "num_queries"})
    assert summary["window"] == {"start_ms": T0 + 2000, "end_ms": T0 + 4000, "source": "perflog",
                                 "events": list(window)}
    overall = summary["overall"]
    # 2 devices x 500 W over 2 s = 2000 J, for 400 queries; the host 1000 W x 2 s.
    assert overall["energy_unit"] == "query" and overall["num_queries"] == 400
    assert overall["energy_per_query_j"] == pytest.approx(5.0)
    assert overall["host_energy_per_query_j"] == pytest.approx(5.0)
    assert "energy_per_sample_j" not in overall


def test_energy_per_tflop_for_a_flop_count(tmp_path):
    node(tmp_path, "a_noderank0", 10, 500.0)
    window = ("BENCHMARK_START", "BENCHMARK_END")
    summary = summarize_round(tmp_path, ["a_noderank0"], [events(T0, T0 + 4000, window)],
                              {"flop_done": 8e15}, window=window,
                              throughput={"unit": "flop", "count": "flop_done"})
    # 2 x 500 W over 4 s = 4000 J for 8000 TFLOP.
    assert summary["overall"]["energy_per_tflop_j"] == pytest.approx(0.5)


def test_a_node_whose_load_exceeds_its_cores_is_flagged_busy(tmp_path):
    """Mean 1-minute load over the window against the node's logical cores (sys_info.json):
    beyond 1.25 x the cores the node was measured beside other work; no cores known, no
    verdict."""
    node(tmp_path, "a_noderank0", 10, 500.0, load=4.6, cores=2)
    node(tmp_path, "b_noderank1", 10, 500.0, load=2.2, cores=2)
    node(tmp_path, "c_noderank2", 10, 500.0, load=9.0)
    summary = summarize_round(tmp_path, ["a_noderank0", "b_noderank1", "c_noderank2"],
                              [events(T0 + 2000, T0 + 6000)], {"num_trained_samples": 10})
    assert summary["nodes"]["a_noderank0"]["system"]["load1_mean"] == pytest.approx(4.6)
    assert summary["nodes"]["a_noderank0"]["busy"] == "load 4.6 on 2 cores"
    assert summary["nodes"]["b_noderank1"]["busy"] == ""        # the case's own threads
    assert summary["nodes"]["c_noderank2"]["busy"] == ""        # cores unknown
    assert summary["overall"]["busy_hosts"] == ["a_noderank0: load 4.6 on 2 cores"]


def test_work_that_ran_before_the_round_flags_the_node_busy(tmp_path):
    """Processes that ran before the round (sys_monitor's other_cpu_cores, other_processes):
    more than a quarter of the cores, or any of them on a device, is other work beside the
    measurement; less, or no such column (an older monitor), is not."""
    node(tmp_path, "a_noderank0", 10, 500.0, cores=4, other_cores=1.5)
    node(tmp_path, "b_noderank1", 10, 500.0, cores=4, other_cores=0.8)
    node(tmp_path, "c_noderank2", 10, 500.0, cores=4, other_cores=0.1, other_processes=1)
    node(tmp_path, "d_noderank3", 10, 500.0, load=6.0, cores=4, other_cores=2, other_processes=2)
    node(tmp_path, "e_noderank4", 10, 500.0, cores=4)
    names = [f"{n}_noderank{i}" for i, n in enumerate("abcde")]
    summary = summarize_round(tmp_path, names, [events(T0 + 2000, T0 + 6000)],
                              {"num_trained_samples": 10})
    busy = {name: summary["nodes"][name]["busy"] for name in names}
    assert busy == {"a_noderank0": "other processes used 1.5 of 4 cores", "b_noderank1": "",
                    "c_noderank2": "1 other process on its devices",
                    "d_noderank3": "load 6 on 4 cores, other processes used 2 of 4 cores, "
                                   "2 other processes on its devices",
                    "e_noderank4": ""}
    assert summary["nodes"]["a_noderank0"]["system"]["other_cpu_cores_mean"] == 1.5
    assert summary["nodes"]["e_noderank4"]["system"]["other_cpu_cores_mean"] is None
    per_device = summary["nodes"]["c_noderank2"]["devices"]["per_device"]
    assert [d["other_processes_max"] for d in per_device] == [1, 1]
    assert len(summary["overall"]["busy_hosts"]) == 3
