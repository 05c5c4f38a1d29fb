#!/usr/bin/env python3
"""The GPU check: one command that proves the nvidia path on a one-GPU node, air-gapped, with
its own PyTorch, and prints one table (``make gpu-check``).

    python3 scripts/gpu_check.py [--deadline 360] [--bundle gpu-bundle] [--work DIR]
                                 [--master-port 29500] [--install-only]

Parts, in the order of their value (a ``--deadline`` in seconds stops the part in flight
cleanly, a round as Ctrl-C stops it, and skips the rest):

0. **install**: where the controller's requirements (``pyproject.toml``) are not met (no
   Ansible on the node), the bundle that ``make gpu-bundle`` made on a connected machine
   (``scripts/gpu_bundle.py``) is installed with ``pip install --no-index --no-deps --target
   <work>/site`` (reused while the bundle is the same) and every requirement is verified
   against the node's own packages; the node's torch is the one used. Then the device: NVML
   (``vendors/nvidia/monitor.py``) names it, and its ``vendors/nvidia/vendor.yml`` datasheet
   entry is the one whose ``device_names`` lists it. Then the data: a synthetic
   ImageNet-shaped set (``flagperf_ansible.datasets.imagenet.write_synthetic``: 256 x 256 JPEG
   images in 1000 classes, 9600 to train on, 1024 to evaluate).
1. **training**: a plain PyTorch loop of resnet50's model, batch and precision
   (``scripts/plain_loop.py``), then resnet50 through the real round path: ``flagperf-ansible
   run -i inventories/local`` with vendor nvidia, runtime none, the detected hardware and the
   case's ``quick`` profile (the standard configuration for one epoch of at most 300 updates,
   on ``GPU_TRAIN_STEPS`` batches of synthetic images: the vendor's 1x1 batch, 256 on A100,
   H100 and H200 as FlagPerf's A100x1x1); p_core of both,
   their ratio (the harness's perturbation; goal 0.99 or more), the same in steady state
   (each side's median step after its first ``core_warmup_steps``: ``steady ratio``) and the
   round's MFU against the datasheet's peak. The plain loop reads the synthetic set through the
   case's own DataLoader, as the round does, so the ratio measures the harness, not two data
   paths.
2. **monitor**: the NVML samples of that round: count, mean power, peak memory, mean
   utilisation, energy per image.
3. **base**: ``computation`` and ``main_memory-bandwidth`` (``quick`` profiles) in the same
   run, each figure as a ratio to the datasheet.
4. **llm**: ``gpt`` (Megatron's GPT-2 345M, megatron-core from the bundle) in the same run,
   profile ``bf16``: 200 steps on the ``megatron_indexed`` tiny data written on the node;
   tokens/s, token/p/s, MFU against the bf16 peak and the peak device memory.
5. **inference**: resnet50 inference (``quick`` profile, random weights) through the case's
   entry, once per engine of the vendor: inductor, onnxruntime's CUDA provider, TensorRT;
   an engine that cannot run here (the CPU-only ``onnxruntime`` package, no ``tensorrt``
   module) is skipped with the reason. p99 latency and images/s.

Without a GPU, one line per part says why it is skipped, and the same parts run on the CPU
with vendor cpu (its profiles, a tiny synthetic set): the CPU half, which CI runs.

Writes ``<work>/gpu_check.md`` (the table) and ``gpu_check.json`` (its rows) beside the run's
results (``<work>/results``) and each part's log (``<work>/logs``). Exit status 0 when every
part that ran passed (a part skipped for a reason is no failure), 1 when one failed or was
stopped at the deadline, 2 when the check cannot start (no bundle, an unmet requirement), 130
on Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_bundle import (BundleError, case_requirements, declared_requirements,  # noqa: E402
                        install_bundle, missing_collections, unmet_requirements)

DEFAULT_WORK = Path("/var/tmp/flagperf-gpu-check")
#: A part is not started with less time than this left before the deadline (s).
LEAST_TIME = 5.0
#: How long a stopped part may take to end cleanly before it is killed (s).
GRACE = 90.0
#: The local inventory's monitors sample this often during the check's rounds (s).
MONITOR_INTERVAL = 0.25
#: The base cases of the check's run, after the training case.
BASE_CASES = ("computation", "main_memory-bandwidth")
#: The LLM case of the check's run, and its data format.
LLM_CASE, LLM_FRAMEWORK, LLM_DATA = "gpt", "megatron", "megatron_indexed"
#: The inference case the check runs once per engine (its launcher is ``python``).
INFERENCE_CASE = "benchmarks/inference/resnet50/pytorch"
#: Run by the node's Python: which engine packages import, and onnxruntime's providers.
ENGINE_PROBE = """
import json
found = {}
try:
    import onnxruntime
    found["onnxruntime"] = [onnxruntime.__version__, onnxruntime.get_available_providers()]
except Exception as error:
    found["onnxruntime"] = [None, f"{type(error).__name__}: {error}"]
try:
    import tensorrt
    found["tensorrt"] = [tensorrt.__version__, None]
except Exception as error:
    found["tensorrt"] = [None, f"{type(error).__name__}: {error}"]
print(json.dumps(found))
"""


class CheckError(Exception):
    """The check cannot start (exit status 2): said in one line."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM reached the check: the part in flight was stopped."""


@dataclass
class Row:
    """One line of the table: ``status`` passed, failed, skipped or stopped (at the deadline);
    ``seconds`` the part's wall time (None where it took none of its own)."""

    part: str
    what: str
    status: str
    figures: str = ""
    seconds: float | None = None


@dataclass(frozen=True)
class Mode:
    """What the check runs on: the vendor, its hardware, the cases' profile (None: the
    hardware's own), the synthetic set's size and the inference engines to try."""

    vendor: str
    hardware: str
    profile: str | None
    device: str
    classes: int
    image_size: int
    val_images: int
    engines: tuple[str, ...]
    #: The LLM case's profile (None: the hardware's own).
    llm_profile: str | None = None


@dataclass
class Deadline:
    """Seconds left of the check's time (``--deadline``), from its start."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def elapsed(self) -> float:
        return time.monotonic() - self.start


# -- the device ------------------------------------------------------------------------------

def detect_gpu() -> tuple[str | None, str]:
    """``(device name, what else NVML says)`` of the first GPU NVML sees (the nvidia vendor's
    monitor plugin), or ``(None, why not)``."""
    path = ROOT / "vendors" / "nvidia" / "monitor.py"
    spec = importlib.util.spec_from_file_location("flagperf_gpu_check_nvml", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        info = module.device_info()
    except RuntimeError as error:
        return None, str(error)
    devices = info["devices"]
    return devices[0]["name"], (f"driver {info.get('driver')}, "
                                f"{devices[0]['memory_total_bytes'] / 2**30:.0f} GiB"
                                + (f", the first of {len(devices)} GPUs" if len(devices) > 1
                                   else ""))


def gpu_hardware(device_name: str) -> tuple[str | None, str]:
    """The nvidia hardware whose datasheet is the device's, and a note: ``(hardware, "")``
    when ``device_names`` lists it; ``(family, note)`` for another board of a family the
    vendor declares (its datasheet is the family's listed board's); ``(None, why)``."""
    from flagperf_ansible.config.vendor import hardware_of_device, read_vendor

    hardware = hardware_of_device(ROOT, "nvidia", device_name)
    if hardware:
        return hardware, ""
    vendor = read_vendor(ROOT, "nvidia")
    for family in vendor.hardware:
        if re.search(rf"\b{re.escape(family)}\b", device_name):
            listed = ", ".join(vendor.datasheet[family].device_names) \
                if family in vendor.datasheet else "none"
            return family, (f"{device_name} is not the board of vendors/nvidia/vendor.yml's "
                            f"{family} datasheet ({listed}): MFU and ratios are against it")
    return None, (f"{device_name}: no hardware of vendors/nvidia/vendor.yml "
                  f"({', '.join(vendor.hardware)}) matches it")


def gpu_mode(hardware: str) -> Mode:
    return Mode(vendor="nvidia", hardware=hardware, profile="quick", device="cuda",
                classes=1000, image_size=256, val_images=1024,
                engines=("inductor", "onnxruntime", "tensorrt"), llm_profile="bf16")


#: The CPU half: vendor cpu, the cases' cpu profiles, a tiny synthetic set (10 classes of
#: 32 x 32 images; 32 to train on: one update an epoch, 3 in the cpu profile's 3 epochs).
CPU_MODE = Mode(vendor="cpu", hardware="cpu", profile=None, device="cpu", classes=10,
                image_size=32, val_images=120, engines=("onnxruntime",))
CPU_TRAIN_IMAGES = 32


# -- the cases -------------------------------------------------------------------------------

def case_spec(mode: Mode, model: str, suite: str = "training", data_dir: Path | None = None,
              framework: str = "pytorch", profile: str | None = None) -> dict[str, Any]:
    """One case of the check's run, on the mode's profile unless ``profile`` names one."""
    spec: dict[str, Any] = {"model": model, "framework": framework, "suite": suite,
                            "hardware": mode.hardware, "nnodes": 1, "nproc_per_node": 1,
                            "repeat": 1}
    if profile or mode.profile:
        spec["profile"] = profile or mode.profile
    if data_dir is not None:
        spec["data_dir"] = str(data_dir)
    return spec


def effective(mode: Mode, spec: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The spec's case id, effective configuration and contract (the controller's)."""
    from flagperf_ansible.config.cases import effective_config, load_case
    from flagperf_ansible.config.casespec import parse_case_spec

    parsed = parse_case_spec(spec)
    case = load_case(ROOT, parsed.model, parsed.framework, parsed.suite)
    return (parsed.case_id, effective_config(ROOT, case, parsed, mode.vendor).config,
            case.contract())


def run_vars(mode: Mode, cases: list[dict[str, Any]], master_port: int) -> dict[str, Any]:
    """The extra variables of the check's run of the local inventory (``-e @file``)."""
    return {"flagperf_vendor": mode.vendor, "flagperf_cases": cases,
            "flagperf_master_port": master_port, "flagperf_monitor_interval": MONITOR_INTERVAL}


#: The most updates the GPU half trains, each side: one epoch of the synthetic set. At the
#: 1x1 batch of 256 (FlagPerf's A100x1x1, mirrored for H100 and H200) the quick profile's 300
#: would take 76,800 images and over a minute a side; 100 leave 90 in steady state.
GPU_TRAIN_STEPS = 100


def train_images(config: dict[str, Any], mode: Mode) -> int:
    """Training images of the synthetic set: one batch for each update the quick profile caps
    at, at most ``GPU_TRAIN_STEPS`` (one epoch); the CPU half's fixed few."""
    if mode.device == "cpu":
        return CPU_TRAIN_IMAGES
    return min(int(config["max_steps"]), GPU_TRAIN_STEPS) * int(config["train_batch_size"])


def planned_steps(config: dict[str, Any], images: int) -> int:
    """The trainer's updates on ``images`` (whole batches, one rank): the first of its epochs
    and max_steps."""
    per_epoch = images // int(config["train_batch_size"])
    steps = per_epoch * int(config.get("epochs") or 1)
    return min(steps, int(config.get("max_steps") or steps))


# -- running the parts -----------------------------------------------------------------------

def run_child(argv: list[str], log: Path, deadline: Deadline, env: dict[str, str] | None = None,
              stop_signal: int = signal.SIGTERM) -> tuple[int | None, bool]:
    """Run ``argv`` in the checkout, output to ``log``, until it ends or the deadline.

    At the deadline it gets ``stop_signal`` (the wrapper takes SIGINT as Ctrl-C: the round in
    flight is stopped on the host and recorded ``interrupted``) and ``GRACE`` seconds to end,
    then its process group is killed. Returns ``(exit status, stopped at the deadline)``.

    Raises:
        Interrupted: the check was interrupted; the child was stopped the same way first.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        child = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                 env=env, start_new_session=True)
        try:
            return child.wait(timeout=max(deadline.left(), 0.1)), False
        except subprocess.TimeoutExpired:
            return _stop(child, stop_signal), True
        except KeyboardInterrupt:
            _stop(child, stop_signal)
            raise Interrupted() from None


def _stop(child: subprocess.Popen, stop_signal: int) -> int | None:
    child.send_signal(stop_signal)
    try:
        return child.wait(timeout=GRACE)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        return child.wait()


def tail(log: Path, lines: int = 3) -> str:
    try:
        text = [line.strip() for line in log.read_text(errors="replace").splitlines()
                if line.strip()]
    except OSError:
        return ""
    return " / ".join(text[-lines:])


def busy(record: dict | None) -> list[str]:
    """The round's "measured on a busy host" notes (the monitor's), if any."""
    nodes = (((record or {}).get("monitor") or {}).get("nodes") or {}).values()
    return [f"measured on a busy host: {node['busy']}" for node in nodes if node.get("busy")]


def steady_ratio(finished: dict[str, Any], plain: dict | None) -> str:
    """The steady-state comparison of the round and the plain loop, or "": each side's median
    step (ms) after its first steps (``core_warmup_steps``), and plain / round, the
    harness's share of the throughput with start-up left out. Both read the same data
    the same way (the case's DataLoader), so the ratio is the harness's cost alone."""
    round_ms = finished.get("core_step_ms_p50")
    plain_ms = (plain or {}).get("core_step_ms_p50")
    if not round_ms or not plain_ms:
        return ""
    return (f"steady ratio {plain_ms / round_ms:.3f} (median step: round {number(round_ms)} ms, "
            f"plain loop {number(plain_ms)} ms, the first {finished.get('core_warmup_steps')} "
            f"and {plain.get('core_warmup_steps')} steps left out)")


def number(value: Any, digits: int = 4) -> str:
    """``value`` with ``digits`` significant digits, or ``n/a``."""
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) else "n/a"


class Check:
    """One run of the check: its parts, in order, and the table's rows."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work: Path = args.work.resolve()
        self.deadline = Deadline(args.deadline)
        self.rows: list[Row] = []
        self.header: list[str] = []
        self.failed = False

    # -- helpers ---------------------------------------------------------------------------
    def add(self, row: Row) -> None:
        self.rows.append(row)
        self.failed |= row.status in ("failed", "stopped")
        seconds = f" ({row.seconds:.1f} s)" if row.seconds is not None else ""
        print(f"{row.part}: {row.what}: {row.status}{seconds}"
              + (f": {row.figures}" if row.figures else ""), flush=True)

    def time_left(self, part: str, what: str) -> bool:
        if self.deadline.left() >= LEAST_TIME:
            return True
        self.add(Row(part, what, "skipped", f"deadline reached ({self.args.deadline:g} s)"))
        return False

    # -- the parts -------------------------------------------------------------------------
    def install(self) -> None:
        start = time.monotonic()
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
        sys.path.insert(0, str(ROOT / "src"))
        missing = [name for name, _ in unmet_requirements(
            [(text, "the controller") for text in declared_requirements(ROOT)]
            + [(text, "the gpt case") for text in case_requirements(ROOT)])]
        missing += missing_collections()
        if not missing:
            self.add(Row("install", "the controller's packages", "passed",
                         "not needed: they are installed here", time.monotonic() - start))
            return
        done = install_bundle(self.args.bundle.resolve(), self.work / "site")
        still = missing_collections()
        if still:
            raise CheckError(f"after installing the bundle, Ansible would not find the "
                             f"collections {', '.join(still)}")
        self.add(Row("install", f"the bundle ({', '.join(missing)} were missing)", "passed",
                     done, time.monotonic() - start))

    def mode(self) -> Mode:
        """The GPU's mode; or, without a usable GPU, one skip line per part and the CPU's."""
        name, why = detect_gpu()
        if name is not None:
            hardware, note = gpu_hardware(name)
            if hardware is not None:
                self.header.append(f"device: {name} ({why}; datasheet: vendors/nvidia/vendor.yml "
                                   f"{hardware})" + (f"; {note}" if note else ""))
                if note:
                    print(f"note: {note}", flush=True)
                return gpu_mode(hardware)
            why = note
        for part, what in (("training", "resnet50 on the GPU (round and plain loop)"),
                           ("monitor", "NVML samples of the training round"),
                           ("base", "computation and main_memory-bandwidth on the GPU"),
                           ("llm", "gpt (GPT-2 345M, megatron-core) in bf16 on the GPU"),
                           ("inference", "resnet50 through inductor, onnxruntime CUDA and "
                                         "TensorRT")):
            self.add(Row(part, what, "skipped", f"no GPU: {why}; the CPU half runs instead"))
        self.header.append(f"device: none usable ({why}): the CPU half, vendor cpu, on "
                           f"{platform.processor() or platform.machine()}")
        return CPU_MODE

    def data(self, mode: Mode, images: int) -> Path:
        from flagperf_ansible.datasets.imagenet import write_synthetic

        start = time.monotonic()
        target = (self.work / "data" /
                  f"imagenet-synthetic-{mode.classes}c-{mode.image_size}px-{images}")
        counts = write_synthetic(target, images, mode.val_images, mode.classes, mode.image_size)
        self.add(Row("data", "synthetic ImageNet-shaped set", "passed",
                     f"{counts['train']} + {counts['val']} JPEG images of {mode.image_size} x "
                     f"{mode.image_size} in {mode.classes} classes: {target}",
                     time.monotonic() - start))
        return target

    def plain_loop(self, mode: Mode, config: dict[str, Any], steps: int, data: Path
                   ) -> dict | None:
        """The plain loop's result, reading ``data`` as the round does, or None (its row
        says why)."""
        what = f"plain PyTorch loop, {steps} steps"
        if not self.time_left("training", what):
            return None
        folder = self.work / "plain_loop"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config))  # JSON is YAML
        output = folder / "result.json"
        output.unlink(missing_ok=True)
        start = time.monotonic()
        rc, stopped = run_child(
            [sys.executable, str(ROOT / "scripts" / "plain_loop.py"), "--config",
             str(folder / "config.json"), "--classes", str(mode.classes), "--steps", str(steps),
             "--output", str(output), "--device", mode.device, "--data", str(data)],
            self.work / "logs" / "plain_loop.log", self.deadline)
        seconds = time.monotonic() - start
        if stopped or rc != 0 or not output.is_file():
            self.add(Row("training", what, "stopped" if stopped else "failed",
                         f"deadline reached ({self.args.deadline:g} s)" if stopped
                         else tail(self.work / "logs" / "plain_loop.log"), seconds))
            return None
        result = json.loads(output.read_text())
        result["seconds"] = seconds
        self.header.append(f"torch {result['torch']}")
        return result

    def run_rounds(self, mode: Mode, cases: list[dict[str, Any]]) -> tuple[Path | None, float,
                                                                          bool, int | None]:
        """The cases through ``flagperf-ansible run`` (local inventory): ``(run folder, wall
        time, stopped at the deadline, exit status)``."""
        extra_file = self.work / "cases.json"
        extra_file.write_text(json.dumps(run_vars(mode, cases, self.args.master_port), indent=1))
        results = self.work / "results"
        before = set(results.glob("run*")) if results.is_dir() else set()
        start = time.monotonic()
        rc, stopped = run_child(
            [sys.executable, "-m", "flagperf_ansible", "run", "-i", "inventories/local",
             "-e", f"@{extra_file}", "--results-dir", str(results)],
            self.work / "logs" / "run.log", self.deadline, stop_signal=signal.SIGINT)
        seconds = time.monotonic() - start
        runs = [p for p in results.glob("run*") if p not in before and (p / "run.json").is_file()]
        return (max(runs, key=lambda p: p.stat().st_mtime) if runs else None), seconds, \
            stopped, rc

    @staticmethod
    def round_of(run_dir: Path | None, case_id: str) -> dict | None:
        path = run_dir / case_id / "round1" / "round.json" if run_dir else None
        return json.loads(path.read_text()) if path and path.is_file() else None

    def round_status(self, record: dict | None, stopped: bool) -> tuple[str, str]:
        """The part's status and, where it did not pass, why. A training round passes here
        when it ran to FINISHED on every host (``ran_to_finish``): a few hundred updates do not
        reach the case's target, nor are they meant to."""
        if record is None:
            if stopped:
                return "skipped", f"deadline reached ({self.args.deadline:g} s)"
            return "failed", "no round.json: " + tail(self.work / "logs" / "run.log")
        status = record.get("status")
        if status == "passed":
            return "passed", ""
        if record.get("suite") == "training" and record.get("ran_to_finish"):
            return "passed", "ran to FINISHED (a throughput check: its target is not the point)"
        if status == "interrupted":
            return ("stopped" if stopped else "failed"), "round interrupted" + (
                f" at the deadline ({self.args.deadline:g} s)" if stopped else "")
        return "failed", f"{status}: {record.get('reason') or ''}".rstrip(": ")

    def training_row(self, mode: Mode, record: dict | None, plain: dict | None, stopped: bool
                     ) -> None:
        profile = ((record or {}).get("profile") or {}).get("name") or mode.profile \
            or mode.hardware
        what = (f"resnet50 round ({mode.vendor} {mode.hardware}, profile {profile}) and the "
                "plain loop")
        status, why = self.round_status(record, stopped)
        finished = (record or {}).get("finished") or {}
        figures = [why] if why else []
        figures += busy(record)
        round_core = finished.get("p_core")
        if round_core is not None:
            figures.append(f"round p_core {number(round_core)} img/s "
                           f"({finished.get('global_steps')} steps)")
        if plain is not None:
            figures.append(f"plain loop p_core {number(plain['p_core'])} img/s "
                           f"({plain['steps']} steps)")
            if round_core:
                figures.append(f"ratio {round_core / plain['p_core']:.3f}")
        steady = steady_ratio(finished, plain)
        if steady:
            figures.append(steady)
        mfu = (record or {}).get("mfu") or {}
        if mfu.get("value") is not None:
            peak = (mfu.get("peak_flops_per_device") or 0) / 1e12
            figures.append(f"MFU {100 * mfu['value']:.1f} % (p_train "
                           f"{number(finished.get('p_train'))} img/s x "
                           f"{number(mfu.get('flops_per_unit'))} FLOP / {mode.hardware} "
                           f"{mfu.get('precision')} peak {number(peak)} TFLOP/s)")
        elif record is not None:
            figures.append(f"MFU n/a: {mfu.get('reason') or 'not computed'}")
        seconds = ((record or {}).get("wall_time") or 0.0) + (plain or {}).get("seconds", 0.0)
        self.add(Row("training", what, status, "; ".join(figures), seconds or None))

    def monitor_row(self, mode: Mode, record: dict | None) -> None:
        source = "NVML" if mode.vendor == "nvidia" else "psutil (vendor cpu)"
        what = f"{source} samples of the training round"
        monitor = (record or {}).get("monitor") or {}
        nodes = list((monitor.get("nodes") or {}).values())
        if not nodes:
            self.add(Row("monitor", what, "skipped" if record is None else "failed",
                         "no round" if record is None else "no monitor section in round.json"))
            return
        node, overall = nodes[0], monitor.get("overall") or {}
        devices = node.get("devices") or {}
        unit = overall.get("energy_unit") or "image"
        energy = overall.get(f"energy_per_{unit}_j")
        power = devices.get("power_w_mean")
        memory = devices.get("mem_used_peak_bytes")
        figures = [f"{node.get('samples')} samples every {node.get('interval_s')} s",
                   f"power {number(power)} W mean" if power is not None
                   else "power n/a (the device reports none)",
                   f"memory {number(memory / 1e9 if memory else None)} GB peak",
                   f"utilisation {number(devices.get('util_percent_mean'))} % mean",
                   f"energy {number(energy)} J per {unit}" if energy is not None
                   else f"energy per {unit} n/a"]
        ok = node.get("status") == "ok" and (node.get("samples") or 0) > 0
        self.add(Row("monitor", what, "passed" if ok else "failed",
                     "; ".join(figures) + ("" if ok else f"; monitor {node.get('status')}: "
                                           f"{node.get('detail')}")))

    def llm_data(self) -> Path:
        """The LLM case's tiny data (written once per work folder: megatron-core's writer)."""
        from flagperf_ansible import datasets

        target = self.work / "data" / LLM_DATA
        if not datasets.check(LLM_DATA, target):
            return target
        start = time.monotonic()
        counts = datasets.prepare(LLM_DATA, target)
        self.add(Row("data", f"{LLM_DATA} tokens", "passed",
                     ", ".join(f"{k} {v}" for k, v in counts.items()) + f": {target}",
                     time.monotonic() - start))
        return target

    def llm_row(self, mode: Mode, record: dict | None, stopped: bool) -> None:
        profile = ((record or {}).get("profile") or {}).get("name") or mode.llm_profile \
            or mode.hardware
        status, why = self.round_status(record, stopped)
        finished = (record or {}).get("finished") or {}
        figures = ([why] if why else []) + busy(record)
        if finished.get("p_train") is not None:
            figures.append(f"{number(finished['p_train'])} tokens/s, "
                           f"{number(finished.get('tokens_per_chip_per_second'))} token/p/s "
                           f"({finished.get('steps_run')} steps, {finished.get('warmup_steps')} "
                           "left out)")
            figures.append(f"loss {number(finished.get('final_loss'))} at the end; peak "
                           f"memory {number(finished.get('peak_memory_gib'))} GiB")
        mfu = (record or {}).get("mfu") or {}
        if mfu.get("value") is not None:
            figures.append(f"MFU {100 * mfu['value']:.1f} % ({mfu.get('precision')} peak "
                           f"{number((mfu.get('peak_flops_per_device') or 0) / 1e12)} TFLOP/s)")
        elif record is not None:
            figures.append(f"MFU n/a: {mfu.get('reason') or 'not computed'}")
        if status == "passed" and (record or {}).get("reason"):
            figures.append(record["reason"])       # e.g. throughput only: no reference curve
        self.add(Row("llm", f"gpt round ({mode.vendor} {mode.hardware}, profile {profile})",
                     status, "; ".join(figures), (record or {}).get("wall_time")))

    def base_row(self, mode: Mode, model: str, record: dict | None, stopped: bool) -> None:
        status, why = self.round_status(record, stopped)
        figures = ([why] if why else []) + busy(record)
        for key, item in ((record or {}).get("datasheet") or {}).items():
            if item.get("value") is None:
                if status == "passed":
                    figures.append(f"{key} n/a ({item.get('reason')})")
                continue
            ratio = (f"{100 * item['ratio']:.1f} % of {number(item.get('spec'))}"
                     if item.get("ratio") is not None else "no datasheet entry")
            figures.append(f"{key} {number(item['value'])} {item.get('unit')} ({ratio})")
        self.add(Row("base", f"{model} ({mode.vendor} {mode.hardware})", status,
                     "; ".join(figures), (record or {}).get("wall_time")))

    def engine_problems(self, mode: Mode) -> dict[str, str]:
        """Why each engine that cannot run here would not (one probe process)."""
        done = subprocess.run([sys.executable, "-c", ENGINE_PROBE], capture_output=True,
                              text=True, timeout=120)
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
        problems = {}
        version, providers = found.get("onnxruntime", [None, "the probe failed"])
        provider = "CUDAExecutionProvider" if mode.vendor == "nvidia" else "CPUExecutionProvider"
        if version is None:
            problems["onnxruntime"] = f"onnxruntime does not import here ({providers})"
        elif provider not in providers:
            problems["onnxruntime"] = (f"onnxruntime {version} has no {provider} (it has "
                                       f"{', '.join(providers)}): the CPU-only package; "
                                       "onnxruntime-gpu has it")
        version, error = found.get("tensorrt", [None, "the probe failed"])
        if version is None:
            problems["tensorrt"] = f"tensorrt does not import here ({error})"
        return problems

    def inference(self, mode: Mode, data: Path) -> None:
        spec = case_spec(mode, "resnet50", "inference", data)
        _, config, contract = effective(mode, spec)
        problems = self.engine_problems(mode)
        onnx: Path | None = None
        for engine in mode.engines:
            label = {"onnxruntime": f"onnxruntime ({'CUDA' if mode.vendor == 'nvidia' else 'CPU'}"
                                    " provider)"}.get(engine, engine)
            what = f"resnet50 through {label} ({mode.vendor} {mode.hardware})"
            if engine in problems:
                self.add(Row("inference", what, "skipped", problems[engine]))
                continue
            if not self.time_left("inference", what):
                continue
            folder = self.work / "inference" / engine
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            engine_config = {**config, "compiler": engine}
            if onnx is not None:
                engine_config["exist_onnx_path"] = str(onnx)
            (folder / "config.json").write_text(json.dumps(engine_config))
            # As the launch runs it: benchmarks/ and src/ first on the path (launchers.case_path).
            path = [str(ROOT / "benchmarks"), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
            env = {**os.environ, "FLAGPERF_VENDOR_DIR": str(ROOT / "vendors" / mode.vendor),
                   "PYTHONPATH": ":".join(filter(None, path))}
            start = time.monotonic()
            rc, stopped = run_child(
                [sys.executable, "-m", "driver.run", "--case", str(ROOT / INFERENCE_CASE),
                 "--config", str(folder / "config.json"), "--output_dir", str(folder),
                 "--data_dir", str(data)],
                self.work / "logs" / f"inference-{engine}.log", self.deadline, env=env)
            seconds = time.monotonic() - start
            self.add(self.inference_row(what, folder, rc, stopped, seconds, contract))
            exported = sorted(folder.glob("*.onnx"))
            onnx = onnx or (exported[0] if exported else None)

    def inference_row(self, what: str, folder: Path, rc: int | None, stopped: bool,
                      seconds: float, contract: dict[str, Any]) -> Row:
        from flagperf_ansible.config.suites import round_verdict
        from flagperf_ansible.results.perflog import parse_rank_log

        log = folder / "rank0.out.log"
        finished = parse_rank_log(log).finished if log.is_file() else None
        if stopped or rc != 0 or not finished:
            why = f"deadline reached ({self.args.deadline:g} s)" if stopped else (
                tail(log) or tail(self.work / "logs" / f"inference-{folder.name}.log"))
            return Row("inference", what, "stopped" if stopped else "failed", why, seconds)
        passed, reason = round_verdict("inference", finished, contract)
        batch, p50 = finished.get("batch_size"), finished.get("inference_latency_p50")
        figures = [f"{number(finished.get('p_inference_core'))} img/s core"
                   + (f" (its {number(finished['foo_time'])} s foo_time included)"
                      if finished.get("foo_time") else ""),
                   f"p99 {number(finished.get('inference_latency_p99'))} ms, "
                   f"p50 {number(p50)} ms per batch of {batch} ({finished.get('precision')})"
                   + (f": {number(batch * 1000.0 / p50)} img/s at p50" if batch and p50 else ""),
                   f"PyTorch {number(finished.get('p_validation_core'))} img/s core",
                   f"output_rel_error {number(finished.get('output_rel_error'), 2)}"]
        if finished.get("export_time"):
            figures.append(f"export {number(finished['export_time'])} s")
        if finished.get("compile_time"):
            figures.append(f"compile {number(finished['compile_time'])} s"
                           + (f" (its first batch {number(finished['warmup_time'])} s)"
                              if finished.get("warmup_time") else ""))
        if not passed:
            figures.insert(0, reason)
        return Row("inference", what, "passed" if passed else "failed", "; ".join(figures),
                   seconds)

    # -- the whole -------------------------------------------------------------------------
    def run(self) -> int:
        self.work.mkdir(parents=True, exist_ok=True)
        if not (os.environ.get("LC_ALL") or os.environ.get("LANG")):
            os.environ["LANG"] = "C.UTF-8"  # Ansible stops unless the locale's encoding is UTF-8
        print(f"gpu check: checkout {ROOT}, Python {platform.python_version()} "
              f"({sys.executable}), deadline {self.args.deadline:g} s, work {self.work}",
              flush=True)
        try:
            self.install()
            if self.args.install_only:
                print("gpu check: installed; to use the controller by hand here:\n"
                      f"  export PYTHONPATH={os.environ['PYTHONPATH']}\n"
                      f"  export PATH={os.environ['PATH']}", flush=True)
                return 0
            mode = self.mode()
            training = case_spec(mode, "resnet50")
            case_id, config, _ = effective(mode, training)
            images = train_images(config, mode)
            data = self.data(mode, images)
            training["data_dir"] = str(data)
            plain = self.plain_loop(mode, config, planned_steps(config, images), data)
            base = {model: case_spec(mode, model, "base") for model in BASE_CASES}
            llm = case_spec(mode, LLM_CASE, data_dir=self.llm_data(), framework=LLM_FRAMEWORK,
                            profile=mode.llm_profile)
            if self.time_left("training", "resnet50 round, base rounds, gpt round"):
                self.rounds(mode, training, case_id, base, plain, llm)
            self.inference(mode, data)
        except (Interrupted, KeyboardInterrupt):
            self.add(Row("check", "interrupted", "stopped", "Ctrl-C or SIGTERM"))
            self.report()
            return 130
        self.report()
        return 1 if self.failed else 0

    def rounds(self, mode: Mode, training: dict, case_id: str, base: dict[str, dict],
               plain: dict | None, llm: dict) -> None:
        from flagperf_ansible.config.casespec import parse_case_spec

        run_dir, seconds, stopped, rc = self.run_rounds(mode, [training, *base.values(), llm])
        record = self.round_of(run_dir, case_id)
        self.training_row(mode, record, plain, stopped)
        self.monitor_row(mode, record)
        walls = [(record or {}).get("wall_time") or 0.0]
        for model, spec in base.items():
            base_record = self.round_of(run_dir, parse_case_spec(spec).case_id)
            walls.append((base_record or {}).get("wall_time") or 0.0)
            self.base_row(mode, model, base_record, stopped)
        llm_record = self.round_of(run_dir, parse_case_spec(llm).case_id)
        walls.append((llm_record or {}).get("wall_time") or 0.0)
        self.llm_row(mode, llm_record, stopped)
        status = "passed" if rc in (0, 1) and run_dir is not None else (
            "stopped" if stopped else "failed")
        why = " (not every round met its suite's pass rule: the training round's target)" \
            if rc == 1 else ""
        self.add(Row("run", "flagperf-ansible run: preflight, prepare, report (rounds apart)",
                     status, f"exit {rc}{why}; {run_dir or tail(self.work / 'logs' / 'run.log')}",
                     max(seconds - sum(walls), 0.0)))

    def report(self) -> None:
        total = self.deadline.elapsed()
        lines = [f"GPU check, {time.strftime('%Y-%m-%d')}: " + "; ".join(self.header),
                 "", "| part | what | status | figures | time |", "|---|---|---|---|---|"]
        for row in self.rows:
            seconds = f"{row.seconds:.1f} s" if row.seconds is not None else ""
            figures = row.figures.replace("|", "/")
            lines.append(f"| {row.part} | {row.what} | {row.status} | {figures} | {seconds} |")
        lines.append(f"| total | | {'failed' if self.failed else 'passed'} | | {total:.1f} s |")
        text = "\n".join(lines) + "\n"
        (self.work / "gpu_check.md").write_text(text)
        (self.work / "gpu_check.json").write_text(json.dumps(
            {"header": self.header, "rows": [asdict(r) for r in self.rows],
             "total_seconds": total, "failed": self.failed}, indent=1) + "\n")
        print("\n" + text, end="", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deadline", type=float, default=360.0, metavar="SECONDS",
                        help="stop the part in flight and skip the rest after this long "
                             "(default %(default)g: six minutes)")
    parser.add_argument("--bundle", type=Path, default=ROOT / "gpu-bundle",
                        help="the controller's wheels (make gpu-bundle; default: %(default)s)")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK,
                        help="data, installs, results and logs (default: %(default)s)")
    parser.add_argument("--master-port", type=int, default=29500,
                        help="the rounds' rendezvous port (default %(default)s)")
    parser.add_argument("--install-only", action="store_true",
                        help="install the bundle where needed, print how to use it, and stop")
    args = parser.parse_args(argv)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return Check(args).run()
    except (CheckError, BundleError) as error:
        print(f"gpu check: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
