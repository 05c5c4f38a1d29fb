import io
import json

from driver import perflog as emitter
from flagperf_ansible.results import perflog as parser

# A FINISHED line of a real FlagPerf run (seed 000, CPM on A100 1x8).
FLAGPERF_LINE = (
    '[PerfLog] {"event": "FINISHED", "value": {"e2e_time": 1661.6114165782928, '
    '"training_sequences_per_second": 579.0933420700227, "converged": true, '
    '"final_loss": 3.066718101501465, "final_mlm_accuracy": 0.920166015625, '
    '"raw_train_time": 1501.713, "init_time": 148.937}, "metadata": {"file": '
    '"/workspace/flagperf/training/benchmarks/cpm/pytorch/run_pretraining.py", "lineno": 158, '
    '"time_ms": 1669034171646, "rank": 0}}'
)


def test_emit_then_parse_round_trip(tmp_path):
    stream = io.StringIO()
    log = emitter.PerfLogger(rank=3, stream=stream)
    log.log(emitter.INIT_START)
    log.log(emitter.STEP_END, {"loss": 1.25, "global_steps": 7})
    written = log.log(emitter.FINISHED, {"p_whole": 12.5, "converged": True, "nan": float("nan")})
    path = tmp_path / "rank3.out.log"
    path.write_text("some warning from torch\n" + stream.getvalue())

    rank_log = parser.parse_rank_log(path)
    assert rank_log.rank == 3
    assert [e["event"] for e in rank_log.events] == ["INIT_START", "STEP_END", "FINISHED"]
    assert rank_log.events[1]["value"] == {"loss": 1.25, "global_steps": 7}
    assert rank_log.finished == {"p_whole": 12.5, "converged": True, "nan": None}
    meta = rank_log.events[-1]["metadata"]
    assert meta == written["metadata"]
    assert meta["rank"] == 3 and meta["file"].endswith("test_perflog.py")
    assert meta["time_ms"] > 1_600_000_000_000  # epoch milliseconds


def test_events_without_value_omit_it():
    stream = io.StringIO()
    emitter.PerfLogger(stream=stream).log(emitter.TRAIN_START)
    record = json.loads(stream.getvalue().removeprefix("[PerfLog] "))
    assert "value" not in record and record["event"] == "TRAIN_START"


def test_unknown_event_is_refused():
    import pytest

    with pytest.raises(ValueError, match="unknown PerfLog event"):
        emitter.PerfLogger(stream=io.StringIO()).log("FINSHED")


def test_flagperf_finished_keeps_keys_and_maps_aliases(tmp_path):
    path = tmp_path / "rank0.out.log"
    path.write_text("2022-11-21 20:36:21,400 [INFO] start\n" + FLAGPERF_LINE + "\n")
    finished = parser.parse_rank_log(path).finished
    assert finished["training_sequences_per_second"] == 579.0933420700227
    assert finished["p_whole"] == 579.0933420700227
    assert finished["final_mlm_accuracy"] == 0.920166015625


def test_truncated_log_keeps_what_parsed(tmp_path):
    path = tmp_path / "rank1.out.log"
    path.write_text('[PerfLog] {"event": "INIT_START", "metadata": {"rank": 1}}\n'
                    '[PerfLog] {"event": "STEP_END", "value": {"loss": 2.\n')
    rank_log = parser.parse_rank_log(path)
    assert [e["event"] for e in rank_log.events] == ["INIT_START"]
    assert rank_log.bad_lines == 1
    assert rank_log.finished is None


def test_exit_rank_flushes_the_output_then_ends_with_the_status(tmp_path):
    """A rank ends at once, even with a non-daemon thread that would hold it at interpreter exit."""
    import subprocess
    import sys
    from pathlib import Path

    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    script = (
        "import sys, threading, time\n"
        f"sys.path.insert(0, {str(benchmarks)!r})\n"
        "from driver import perflog\nfrom driver.dist import exit_rank\n"
        "threading.Thread(target=time.sleep, args=(600,)).start()\n"
        "perflog.PerfLogger(rank=0).log(perflog.FINISHED, {'p_whole': 1.0})\n"
        "sys.stdout.write('no newline yet')\n"
        "exit_rank(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3
    assert '"event": "FINISHED"' in done.stdout
    assert done.stdout.endswith("no newline yet")


# upstream FlagPerf training/benchmarks/driver/event.py, class Event (every member).
FLAGPERF_EVENTS = (
    "INIT_START", "INIT_END", "TRAIN_START", "TRAIN_END", "EPOCH_BEGIN", "EPOCH_END",
    "STEP_BEGIN", "STEP_END", "BACKWARD", "INIT_EVALUATION", "EVALUATE", "LAUNCH_TRAINING",
    "CONVERT_MODEL", "CREATE_OPTIMIZER", "MODEL_TO_FP16", "MODEL_TO_DDP", "FINISHED",
    "SUBMIT_INFO",
)


def test_every_flagperf_inference_and_base_event_is_written_and_parsed(tmp_path):
    inference = ("VALIDATION_START", "VALIDATION_END", "EXPORT_START", "EXPORT_END",
                 "COMPILE_START", "COMPILE_END", "INFERENCE_START", "INFERENCE_END", "FORWARD")
    names = FLAGPERF_EVENTS + inference + ("BENCHMARK_START", "BENCHMARK_END")
    assert all(getattr(emitter, name) == name for name in names)
    assert set(emitter.EVENTS) == set(names)
    assert set(emitter.FLAGPERF_INFERENCE_PHASES.values()) <= set(emitter.EVENTS)
    stream = io.StringIO()
    log = emitter.PerfLogger(rank=0, stream=stream)
    for number, name in enumerate(names):
        log.log(name, {"n": number})
    path = tmp_path / "rank0.out.log"
    path.write_text(stream.getvalue())
    events = parser.parse_rank_log(path).events
    assert [(e["event"], e["value"]["n"]) for e in events] == [(n, i) for i, n in enumerate(names)]


def helper_logging_for_its_caller(log):
    return log.log(emitter.EVALUATE, {"acc1": 1.0}, stacklevel=2)


def test_metadata_names_the_line_that_logged():
    import sys

    log = emitter.PerfLogger(stream=io.StringIO())
    line = sys._getframe().f_lineno + 1
    direct = log.log(emitter.STEP_END, {"loss": 1.0})["metadata"]
    line_of_helper_call = sys._getframe().f_lineno + 1
    through_helper = helper_logging_for_its_caller(log)["metadata"]
    assert (direct["file"], direct["lineno"]) == (__file__, line)
    assert (through_helper["file"], through_helper["lineno"]) == (__file__, line_of_helper_call)


def test_tensors_and_numpy_scalars_are_written_as_numbers_and_non_finite_as_null():
    import numpy as np
    import pytest
    import torch

    stream = io.StringIO()
    log = emitter.PerfLogger(stream=stream)
    log.log(emitter.STEP_END, {"loss": torch.tensor(0.5), "lr": np.float32(0.25),
                               "steps": np.int64(3), "list": [torch.tensor(2), 1.0]})
    log.log(emitter.EVALUATE, {"acc1": torch.tensor(float("nan")), "inf": float("inf"),
                               "nested": {"x": np.float64("-inf")}, 7: "int key"})
    first, second = (json.loads(line.removeprefix("[PerfLog] "))["value"]
                     for line in stream.getvalue().splitlines())
    assert first == {"loss": 0.5, "lr": 0.25, "steps": 3, "list": [2, 1.0]}
    assert second == {"acc1": None, "inf": None, "nested": {"x": None}, "7": "int key"}
    from pathlib import Path

    with pytest.raises(TypeError):
        log.log(emitter.SUBMIT_INFO, {"config_path": Path("/x")})


def test_reading_only_the_kept_events_gives_the_same_finished_and_bad_lines(tmp_path):
    """summarize's way (``keep``): the window's events and the last FINISHED, nothing else
    decoded; a STEP_END line cut short still counts as not parsed."""
    stream = io.StringIO()
    log = emitter.PerfLogger(rank=0, stream=stream)
    log.log(emitter.INIT_START)
    log.log(emitter.TRAIN_START)
    for step in range(3):
        log.log(emitter.STEP_END, {"loss": 1.0 / (step + 1), "global_steps": step})
    log.log(emitter.EVALUATE, {"eval_acc1": 50.0})
    log.log(emitter.TRAIN_END)
    log.log(emitter.FINISHED, {"p_whole": 1.0})
    log.log(emitter.FINISHED, {"p_whole": 2.0})
    path = tmp_path / "rank0.out.log"
    path.write_text(stream.getvalue() + '[PerfLog] {"event": "STEP_END", "value": {"loss": 0.\n')

    kept = parser.parse_rank_log(path, keep=("TRAIN_START", "TRAIN_END"))
    every = parser.parse_rank_log(path)
    assert [e["event"] for e in kept.events] == ["TRAIN_START", "TRAIN_END", "FINISHED"]
    assert len(every.events) == 9
    assert kept.finished == every.finished == {"p_whole": 2.0}
    assert kept.bad_lines == every.bad_lines == 1
    assert kept.rank == every.rank == 0
