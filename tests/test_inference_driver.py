"""benchmarks/driver/torch/inference.py and the engine classes (vendors/*/inference_engine/).

A tiny case (a small CNN on seeded random images, labelled by a seeded copy of the model with
every fourth label wrong, so that top-1 is a real 0.75) runs through ``main`` in a subprocess,
with a real config.yaml, output folder and FLAGPERF_VENDOR_DIR=vendors/cpu (ONNX Runtime); each
switch of the configuration is run once. The nvidia engines are run as far as this CPU machine
allows: tensorrt and the CUDA onnxruntime must fail with their one-line errors, inductor
compiles the tiny model on the CPU when a C compiler is present.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from driver.torch.inference import InferenceError, PathResult, load_engine_class
from flagperf_ansible.results.perflog import parse_lines
from flagperf_ansible.config.suites import round_verdict
from unavailable import unavailable

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
CPU_VENDOR = ROOT / "vendors" / "cpu"
NVIDIA_VENDOR = ROOT / "vendors" / "nvidia"

ITEMS, BATCH, REPEAT = 20, 8, 2          # 3 batches (8, 8, 4) per pass
BATCHES = REPEAT * 3

CASE = '''
"""A tiny inference case for the driver's tests: 20 seeded 3x8x8 images, 4 classes."""
import warnings

import torch

from driver.torch import inference

ITEMS, CLASSES = 20, 4


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, CLASSES)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def _net(config):
    torch.manual_seed(config["random_seed"])
    return Net().eval()


def collate(items):
    images, labels = torch.utils.data.default_collate(items)
    return (images,), labels


def build_dataloader(config, data_dir):
    generator = torch.Generator().manual_seed(config["random_seed"] + 1)
    images = torch.randn(ITEMS, 3, 8, 8, generator=generator)
    with torch.no_grad():
        labels = _net(config)(images).argmax(dim=1)
    labels[::4] = (labels[::4] + 1) % CLASSES  # 5 of 20 wrong: top-1 0.75
    return torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(images, labels), batch_size=config["batch_size"],
        drop_last=False, num_workers=config["num_workers"], collate_fn=collate)


def create_model(config, data_dir):
    return _net(config).to(inference.device(config))


def evaluator(outputs, labels):
    return int((outputs.argmax(dim=1) == labels).sum()), len(labels)


def model_forward(model, dataloader, evaluator, config):
    def call(inputs):
        with torch.no_grad():
            return model(*inputs), 0.0
    return inference.timed_forward(call, dataloader, evaluator, config)


def export_model(model, config, onnx_path):
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, (torch.randn(2, 3, 8, 8),), str(onnx_path),
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                          dynamo=False)
    return onnx_path


def engine_forward(engine, dataloader, evaluator, config):
    return inference.timed_forward(engine, dataloader, evaluator, config)
'''

ENTRY = f'''
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), {str(BENCHMARKS)!r}]
from driver.dist import exit_rank
from driver.torch.inference import main
import case

if __name__ == "__main__":
    exit_rank(main(case, "tiny inference case"))
'''

#: A test engine that compiles lazily, as inductor does: its first call sleeps 0.5 s.
LAZY_ENGINE = '''
import time


class InferModel:
    READS_ONNX = False

    def __init__(self, config, onnx_path, model):
        self.model = model
        self.calls = 0

    def __call__(self, inputs):
        self.calls += 1
        if self.calls == 1:
            time.sleep(0.5)
        return self.model(*inputs), 0.0
'''

#: A test engine: the PyTorch model, claiming 0.05 s of foo_time per batch.
FOO_ENGINE = '''
class InferModel:
    def __init__(self, config, onnx_path, model):
        self.model = model

    def __call__(self, inputs):
        return self.model(*inputs), 0.05
'''

CONFIG = {"batch_size": BATCH, "flops": "2*1.2e3", "fp16": False, "compiler": "onnxruntime",
          "num_workers": 0, "log_freq": 2, "repeat": REPEAT, "no_validation": False,
          "exist_onnx_path": None, "exist_compiler_path": None, "random_seed": 7,
          "target_acc_gap": 0.05, "target_output_rel_error": 0.01, "ort_threads": 1}

SEVEN_STEPS = ["INIT_START", "INIT_END", "VALIDATION_START", "VALIDATION_END", "EXPORT_START",
               "EXPORT_END", "COMPILE_START", "COMPILE_END", "INFERENCE_START", "INFERENCE_END",
               "FINISHED"]
FINISHED_KEYS = {
    "e2e_time", "p_validation_whole", "p_validation_core", "p_inference_whole",
    "p_inference_core", "val_average_acc", "infer_average_acc", "final_acc_gap",
    "target_acc_gap", "validation_latency_p50", "validation_latency_p90",
    "validation_latency_p99", "inference_latency_p50", "inference_latency_p90",
    "inference_latency_p99", "foo_time", "num_items", "export_time", "compile_time",
    "build_time", "warmup_time", "compiler",
    "paths_run", "precision", "batch_size", "device", "output_rel_error", "top1_agreement",
    "target_output_rel_error"}


class Run:
    """One run of the tiny case: exit status, PerfLog events, the rank's log text."""

    def __init__(self, returncode: int, log: str, output_dir: Path, stderr: str) -> None:
        self.returncode = returncode
        self.log = log
        self.output_dir = output_dir
        self.stderr = stderr
        self.events, bad = parse_lines(log.splitlines())
        assert bad == 0

    def names(self) -> list[str]:
        """The events' names, without the FORWARD progress events."""
        return [e["event"] for e in self.events if e["event"] != "FORWARD"]

    def value(self, name: str) -> dict:
        [value] = [e.get("value") for e in self.events if e["event"] == name]
        return value

    @property
    def finished(self) -> dict:
        return self.value("FINISHED")


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory) -> Path:
    """``<tmp>/tiny/pytorch/`` holding the case and its entry, and ``<tmp>/data``."""
    root = tmp_path_factory.mktemp("inference")
    folder = root / "tiny" / "pytorch"
    folder.mkdir(parents=True)
    (folder / "case.py").write_text(CASE)
    (folder / "run_inference.py").write_text(ENTRY)
    (root / "data").mkdir()
    return folder


def run_case(case_dir: Path, name: str, vendor_dir: Path = CPU_VENDOR, **overrides) -> Run:
    """Run the tiny case with CONFIG and ``overrides`` into ``<tmp>/<name>/``."""
    root = case_dir.parents[1]
    output_dir = root / name
    output_dir.mkdir()
    config = output_dir / "config.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, **overrides}))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(FLAGPERF_VENDOR_DIR=str(vendor_dir), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(case_dir / "run_inference.py"), "--config", str(config),
         "--output_dir", str(output_dir), "--data_dir", str(root / "data")],
        env=env, capture_output=True, text=True, timeout=120)
    log = (output_dir / "rank0.out.log").read_text()
    return Run(proc.returncode, log, output_dir, proc.stderr)


@pytest.fixture(scope="module")
def first(case_dir) -> Run:
    """The standard run: validation, export, ORT (writing its optimized model to
    ``<data>/cache/tiny.opt.onnx``, relative to the data folder), inference."""
    run = run_case(case_dir, "first", exist_compiler_path="cache/tiny.opt.onnx")
    assert run.returncode == 0, run.log
    return run


def test_the_seven_steps_in_order_and_their_figures(first, case_dir):
    assert first.names() == SEVEN_STEPS
    forward = [e["value"] for e in first.events if e["event"] == "FORWARD"]
    # log_freq 2: step 2 of each pass of each path.
    assert [(f["path"], f["pass"], f["step"]) for f in forward] == [
        ("validation", 1, 2), ("validation", 2, 2), ("inference", 1, 2), ("inference", 2, 2)]
    done = first.finished
    assert set(done) == FINISHED_KEYS
    assert done["paths_run"] == ["validation", "inference"]
    assert done["compiler"] == "onnxruntime" and done["precision"] == "fp32"
    assert done["num_items"] == REPEAT * ITEMS
    assert done["val_average_acc"] == 0.75
    assert done["final_acc_gap"] == pytest.approx(
        abs(done["val_average_acc"] - done["infer_average_acc"]))
    assert done["final_acc_gap"] <= done["target_acc_gap"] == 0.05
    # onnxruntime computes the exported model: the same outputs, to float rounding.
    assert done["output_rel_error"] < 1e-5 and done["top1_agreement"] == 1.0
    assert round_verdict("inference", done, {"target": TARGET}) == (True, "")
    for path in ("validation", "inference"):
        assert done[f"p_{path}_core"] >= done[f"p_{path}_whole"] > 0
        p50, p90, p99 = (done[f"{path}_latency_p{q}"] for q in (50, 90, 99))
        assert 0 < p50 <= p90 <= p99
    end = first.value("INFERENCE_END")
    assert end["batches"] == BATCHES and end["items"] == REPEAT * ITEMS
    assert done["p_inference_core"] == pytest.approx(end["items"] / end["core_s"])
    assert done["foo_time"] == 0.0
    assert done["export_time"] > 0 and done["compile_time"] > 0
    onnx = Path(first.value("EXPORT_END")["onnx_path"])
    assert onnx == first.output_dir / "tiny_bs8_fp32.onnx" and onnx.is_file()
    compiled = first.value("COMPILE_END")
    assert compiled["loaded_optimized"] is False
    assert compiled["wrote_optimized"] == str(case_dir.parents[1] / "data/cache/tiny.opt.onnx")
    assert compiled["intra_op_threads"] == 1
    assert first.stderr == ""


def test_compiler_null_ends_after_the_validation(case_dir):
    run = run_case(case_dir, "null", compiler=None)
    assert run.returncode == 0, run.log
    # The validation is the measured path: the monitoring window encloses it.
    assert run.names() == ["INIT_START", "INIT_END", "INFERENCE_START", "VALIDATION_START",
                           "VALIDATION_END", "INFERENCE_END", "FINISHED"]
    done = run.finished
    assert done["paths_run"] == ["validation"] and done["compiler"] is None
    assert "final_acc_gap" not in done
    assert done["num_items"] == REPEAT * ITEMS and done["val_average_acc"] == 0.75
    assert done["p_inference_core"] is None and done["infer_average_acc"] is None
    assert done["export_time"] is None and done["compile_time"] is None
    assert not list(run.output_dir.glob("*.onnx"))


def test_a_second_round_reuses_the_onnx_file_and_the_optimized_model(first, case_dir):
    data = case_dir.parents[1] / "data"
    optimized = data / "cache" / "tiny.opt.onnx"
    written = optimized.stat().st_mtime_ns
    shutil.copy(first.output_dir / "tiny_bs8_fp32.onnx", data / "tiny.onnx")
    run = run_case(case_dir, "second", exist_onnx_path="tiny.onnx",
                   exist_compiler_path="cache/tiny.opt.onnx")
    assert run.returncode == 0, run.log
    assert "EXPORT_START" not in run.names() and "EXPORT_END" not in run.names()
    assert run.value("COMPILE_START")["onnx_source"] == "exist_onnx_path"
    assert run.value("COMPILE_START")["onnx_path"] == str(data / "tiny.onnx")
    compiled = run.value("COMPILE_END")
    assert compiled["loaded_optimized"] is True and compiled["model_file"] == str(optimized)
    assert optimized.stat().st_mtime_ns == written
    done = run.finished
    assert done["export_time"] is None
    assert done["infer_average_acc"] == pytest.approx(first.finished["infer_average_acc"])
    assert done["final_acc_gap"] <= 0.05


def test_no_validation_runs_the_engine_path_only(first, case_dir):
    run = run_case(case_dir, "engine_only", no_validation=True,
                   exist_onnx_path=str(first.output_dir / "tiny_bs8_fp32.onnx"))
    assert run.returncode == 0, run.log
    assert run.names() == ["INIT_START", "INIT_END", "COMPILE_START", "COMPILE_END",
                           "INFERENCE_START", "INFERENCE_END", "FINISHED"]
    assert run.value("INIT_END")["model"] is None  # create_model was not called
    done = run.finished
    assert done["paths_run"] == ["inference"] and "final_acc_gap" not in done
    assert done["val_average_acc"] is None and done["p_validation_core"] is None
    assert done["infer_average_acc"] == 0.75 and done["num_items"] == REPEAT * ITEMS


@pytest.mark.parametrize("overrides, line", [
    ({"compiler": "nosuch"},
     "inference: compiler 'nosuch': no engine file {vendor}/inference_engine/nosuch.py (this "
     "vendor has: onnxruntime)"),
    ({"no_validation": True},
     "inference: {config}: no_validation: needs exist_onnx_path: without the model there is "
     "nothing to export"),
], ids=["unknown compiler", "no_validation without an ONNX file"])
def test_a_wrong_configuration_fails_in_init_with_one_line(case_dir, overrides, line):
    name = "bad_" + "_".join(overrides)
    run = run_case(case_dir, name, **overrides)
    assert run.returncode == 1
    config = case_dir.parents[1] / name / "config.yaml"
    assert run.log.splitlines()[-1] == line.format(vendor=CPU_VENDOR, config=config)
    assert "Traceback" not in run.log
    assert run.names() == ["INIT_START"]


def test_a_lazy_compile_is_in_compile_time_not_in_the_core_time(case_dir, tmp_path):
    (tmp_path / "inference_engine").mkdir()
    (tmp_path / "inference_engine" / "lazy.py").write_text(LAZY_ENGINE)
    run = run_case(case_dir, "lazy", vendor_dir=tmp_path, compiler="lazy")
    assert run.returncode == 0, run.log
    done, compiled = run.finished, run.value("COMPILE_END")
    assert done["warmup_time"] >= 0.5 and compiled["warmup_time"] == done["warmup_time"]
    assert done["compile_time"] == pytest.approx(done["build_time"] + done["warmup_time"])
    # The timed loop starts after the first call: no batch waits for the compile.
    assert done["inference_latency_p99"] < 500.0
    assert run.value("INFERENCE_END")["core_s"] < 0.5


def test_foo_time_is_reported_never_subtracted(case_dir, tmp_path):
    (tmp_path / "inference_engine").mkdir()
    (tmp_path / "inference_engine" / "foo.py").write_text(FOO_ENGINE)
    # The engine needs no ONNX file: exist_onnx_path skips the export.
    run = run_case(case_dir, "foo", vendor_dir=tmp_path, compiler="foo",
                   exist_onnx_path="unused.onnx")
    assert run.returncode == 0, run.log
    done, end = run.finished, run.value("INFERENCE_END")
    assert done["foo_time"] == pytest.approx(0.05 * BATCHES)
    # The throughputs divide by the measured times as they are: foo_time is not taken off.
    assert done["p_inference_core"] == pytest.approx(REPEAT * ITEMS / end["core_s"])
    assert done["p_inference_whole"] == pytest.approx(REPEAT * ITEMS / end["whole_s"])
    assert done["final_acc_gap"] == 0.0


#: An engine whose outputs are one value for every class and input: where a model predicts
#: nearly one class, its accuracy may be close to the model's, yet it computes another function.
CONSTANT_ENGINE = '''
import torch


class InferModel:
    def __init__(self, config, onnx_path, model):
        self.model = model

    def __call__(self, inputs):
        outputs = self.model(*inputs)
        return torch.zeros_like(outputs) + outputs.mean(), 0.0
'''
TARGET = {"metric": "final_acc_gap", "comparison": "<=", "config_key": "target_acc_gap"}


def test_an_engine_whose_outputs_are_not_the_models_fails_its_round(case_dir, tmp_path):
    """Outputs collapsed to one value for every class: the round fails on its outputs, whatever
    the accuracy gap says."""
    (tmp_path / "inference_engine").mkdir()
    (tmp_path / "inference_engine" / "flat.py").write_text(CONSTANT_ENGINE)
    run = run_case(case_dir, "flat", vendor_dir=tmp_path, compiler="flat",
                   exist_onnx_path="unused.onnx")
    assert run.returncode == 0, run.log
    done = run.finished
    assert done["output_rel_error"] > 0.5 and done["target_output_rel_error"] == 0.01
    passed, reason = round_verdict("inference", {**done, "final_acc_gap": 0.0}, {"target": TARGET})
    assert not passed and reason.startswith("the engine's outputs are not the framework's: "
                                            "output_rel_error "), reason


def test_output_agreement_of_logits_flat_outputs_and_ids():
    from driver.torch.inference import _kept, output_agreement

    logits = torch.tensor([[1.0, 3.0, 2.0], [4.0, 0.0, 1.0]])
    framework = PathResult(outputs=[_kept(logits)])
    # The same values, flat (an engine returning a vector): read in the framework's shape.
    same = output_agreement(framework, PathResult(outputs=[_kept(logits.reshape(-1))]))
    assert same == {"output_rel_error": 0.0, "top1_agreement": 1.0}
    # A constant: every row picks the first class, and the error is its distance.
    flat = torch.full_like(logits, float(logits.mean()))
    other = output_agreement(framework, PathResult(outputs=[_kept(flat)]))
    expected = float(torch.linalg.vector_norm(flat - logits) / torch.linalg.vector_norm(logits))
    assert other["output_rel_error"] == pytest.approx(expected)
    assert other["top1_agreement"] == 0.5     # the framework picks classes 1 and 0, it 0 and 0
    ids = output_agreement(PathResult(outputs=[_kept(torch.tensor([[5, 6], [7, 8]]))]),
                           PathResult(outputs=[_kept(torch.tensor([[5, 6], [7, 0]]))]))
    assert ids == {"output_rel_error": 0.25, "top1_agreement": 0.75}
    assert output_agreement(framework, PathResult(outputs=[_kept(torch.ones(4))])) == {
        "output_rel_error": None, "top1_agreement": None}


def test_path_result_figures():
    result = PathResult(items=40, batches=4, whole_s=2.0, core_s=0.5,
                        batch_s=[0.004, 0.001, 0.003, 0.002], correct=3, counted=4)
    assert (result.whole, result.core, result.accuracy) == (20.0, 80.0, 0.75)
    # Linear interpolation between ranks, in ms (numpy.percentile's default).
    assert result.latency(0) == pytest.approx(1.0)
    assert result.latency(50) == pytest.approx(2.5)
    assert result.latency(90) == pytest.approx(3.7)
    assert result.latency(100) == pytest.approx(4.0)
    empty = PathResult()
    assert (empty.whole, empty.core, empty.accuracy, empty.latency(50)) == (None,) * 4


# -- the nvidia engines, as far as a CPU machine runs them ------------------------------------

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None,
                    reason="tensorrt is installed here")
def test_nvidia_tensorrt_says_it_is_not_installed():
    path = NVIDIA_VENDOR / "inference_engine" / "tensorrt.py"
    spec = importlib.util.spec_from_file_location("flagperf_test_tensorrt_engine", path)
    with pytest.raises(RuntimeError) as raised:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    message = str(raised.value)
    assert message.startswith("tensorrt is not installed in this environment (NVIDIA's tensorrt "
                              "wheel downloads its libraries from NVIDIA's index")
    assert "\n" not in message
    # Through the driver: one line naming the compiler and the file.
    with pytest.raises(InferenceError, match=r"^compiler 'tensorrt': loading .*tensorrt\.py "
                                             r"failed: RuntimeError: tensorrt is not installed"):
        load_engine_class("tensorrt", NVIDIA_VENDOR)


def test_nvidia_onnxruntime_needs_the_cuda_provider(first):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider")
    engine = load_engine_class("onnxruntime", NVIDIA_VENDOR)
    assert engine.__module__ == "flagperf_inference_engine_onnxruntime"
    with pytest.raises(RuntimeError) as raised:
        engine({}, first.output_dir / "tiny_bs8_fp32.onnx", None)
    message = str(raised.value)
    assert "has no CUDAExecutionProvider" in message and "onnxruntime-gpu" in message
    assert "\n" not in message


def test_nvidia_inductor_compiles_the_model_on_the_cpu():
    if shutil.which("cc") is None:
        unavailable("no C compiler (cc): inductor cannot build CPU kernels here")
    engine_class = load_engine_class("inductor", NVIDIA_VENDOR)
    assert engine_class.READS_ONNX is False  # the driver exports no ONNX file for it
    with pytest.raises(RuntimeError, match="no_validation"):
        engine_class({}, None, None)
    torch.manual_seed(0)
    model = Tiny().eval()
    images = torch.randn(4, 3, 8, 8)
    engine = engine_class({"dynamo_mode": None}, None, model)
    from torch._inductor import config as inductor_config

    # One compile thread: a pool of compile workers costs more than it saves here.
    with inductor_config.patch(compile_threads=1):
        outputs, foo_time = engine((images,))
    with torch.no_grad():
        expected = model(images)
    torch.testing.assert_close(outputs, expected, rtol=1e-4, atol=1e-5)
    assert foo_time > 0  # the first call compiled (the warm-up)
    outputs, foo_time = engine((images,))
    assert foo_time == 0.0
    torch.testing.assert_close(outputs, expected, rtol=1e-4, atol=1e-5)


#: An engine that compiles the PyTorch model itself and reads no ONNX file (as inductor).
NO_ONNX_ENGINE = '''
class InferModel:
    READS_ONNX = False

    def __init__(self, config, onnx_path, model):
        assert onnx_path is None
        self.model = model

    def __call__(self, inputs):
        return self.model(*inputs), 0.0
'''


def test_an_engine_that_reads_no_onnx_file_gets_no_export(case_dir, tmp_path):
    (tmp_path / "inference_engine").mkdir()
    (tmp_path / "inference_engine" / "own.py").write_text(NO_ONNX_ENGINE)
    run = run_case(case_dir, "no_onnx", vendor_dir=tmp_path, compiler="own")
    assert run.returncode == 0, run.log
    assert run.names() == [n for n in SEVEN_STEPS if not n.startswith("EXPORT")]
    assert run.value("COMPILE_START")["onnx_path"] is None
    assert run.value("COMPILE_START")["onnx_source"] is None
    assert run.finished["export_time"] is None and not list(run.output_dir.glob("*.onnx"))
    assert run.finished["output_rel_error"] == 0.0
