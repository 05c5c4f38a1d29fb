"""The GPU check (scripts/gpu_check.py) and its bundle (scripts/gpu_bundle.py).

On this machine (no GPU) the check runs its CPU half for real: one line per GPU part saying
why it is skipped, then the same parts with vendor cpu through the real round path, the plain
loop, the inference driver and the cpu vendor's onnxruntime engine. Its GPU half needs a GPU
node (README "The GPU check"). The bundle is made for real from the package index (the
preparing step, and its size), and installed from hand-made wheels (offline) to check the
install and its requirement check.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_bundle  # noqa: E402
import gpu_check  # noqa: E402

#: The parts a GPU node runs, each skipped with its reason here.
GPU_PARTS = ("training", "monitor", "base", "llm", "inference")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def gpu_check_cpu_half(tmp_path_factory):
    """One run of the check on this machine: ``(process, gpu_check.json, work folder)``."""
    work = tmp_path_factory.mktemp("gpu-check")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--work", str(work),
         "--master-port", str(free_port()), "--deadline", "1200"],
        capture_output=True, text=True, timeout=1500, cwd=ROOT)
    table = work / "gpu_check.json"
    assert table.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads(table.read_text()), work


def rows_of(table: dict, part: str) -> list[dict]:
    return [row for row in table["rows"] if row["part"] == part]


def test_without_a_gpu_each_gpu_part_says_why_and_the_cpu_half_passes(gpu_check_cpu_half):
    done, table, work = gpu_check_cpu_half
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    skipped = [line for line in done.stdout.splitlines() if ": skipped: no GPU: " in line]
    assert [line.split(":", 1)[0] for line in skipped] == list(GPU_PARTS), done.stdout
    assert all(line.endswith("; the CPU half runs instead") for line in skipped)
    assert not table["failed"]
    for row in table["rows"]:
        assert row["status"] in ("passed", "skipped"), row
    ran = [(row["part"], row["status"]) for row in table["rows"] if row["status"] == "passed"]
    assert ran == [("install", "passed"), ("data", "passed"), ("data", "passed"),
                   ("training", "passed"), ("monitor", "passed"), ("base", "passed"),
                   ("base", "passed"), ("llm", "passed"), ("run", "passed"),
                   ("inference", "passed")]
    markdown = (work / "gpu_check.md").read_text()
    assert markdown.startswith("GPU check, ") and "the CPU half, vendor cpu" in markdown
    assert "| part | what | status | figures | time |" in markdown
    assert markdown.count("\n| ") == len(table["rows"]) + 2  # the header, the rows, the total


def test_the_cpu_half_trains_gpt_on_megatron_core_through_the_round_path(gpu_check_cpu_half):
    _, table, work = gpu_check_cpu_half
    [llm] = [r for r in rows_of(table, "llm") if r["status"] == "passed"]
    assert llm["what"] == "gpt round (cpu cpu, profile cpu)"
    tokens = float(re.search(r"([\d.e+]+) tokens/s, ", llm["figures"]).group(1))
    assert tokens > 0 and "(200 steps, 5 left out)" in llm["figures"]
    # No datasheet for the cpu vendor: MFU says why; the cpu profile follows its reference.
    assert "MFU n/a: " in llm["figures"]
    [run_dir] = (work / "results").glob("run*")
    record = json.loads((run_dir / "gpt-megatron-cpux1x1/round1/round.json").read_text())
    assert record["status"] == "passed" and record["finished"]["p_train"] == pytest.approx(tokens, rel=1e-3)


def test_the_cpu_half_runs_the_round_path_the_plain_loop_and_the_engine(gpu_check_cpu_half):
    _, table, work = gpu_check_cpu_half
    [training] = [r for r in rows_of(table, "training") if r["status"] == "passed"]
    figures = training["figures"]
    core = re.search(r"round p_core ([0-9.e+]+) img/s \((\d+) steps\)", figures)
    plain = re.search(r"plain loop p_core ([0-9.e+]+) img/s \((\d+) steps\)", figures)
    ratio = re.search(r"ratio ([0-9.]+)", figures)
    assert core and plain and ratio, figures
    assert core.group(2) == plain.group(2) == "3"  # the cpu profile's 3 epochs of one update
    assert float(ratio.group(1)) == pytest.approx(float(core.group(1)) / float(plain.group(1)),
                                                  rel=2e-3)
    # In steady state: each side's median step after its first (of 3 steps: 1 left out).
    steady = re.search(r"steady ratio ([0-9.]+) \(median step: round ([0-9.e+]+) ms, plain "
                       r"loop ([0-9.e+]+) ms, the first 1 and 1 steps left out\)", figures)
    assert steady, figures
    assert float(steady.group(1)) == pytest.approx(
        float(steady.group(3)) / float(steady.group(2)), rel=2e-3)
    assert "MFU n/a: " in figures and "no fp32 peak for cpu" in figures
    [run_dir] = (work / "results").glob("run*")
    record = json.loads((run_dir / "resnet50-pytorch-cpux1x1/round1/round.json").read_text())
    assert record["ran_to_finish"] and record["profile"]["name"] == "cpu"
    assert record["config"]["train_batch_size"] == 32 and record["finished"]["global_steps"] == 3
    plain_result = json.loads((work / "plain_loop" / "result.json").read_text())
    assert (plain_result["steps"], plain_result["batch_size"], plain_result["crop"]) == (3, 32, 16)
    assert plain_result["p_core"] == pytest.approx(float(plain.group(1)), rel=1e-3)
    assert plain_result["data"] == "the case's DataLoader"  # the round's data path
    assert record["finished"]["core_warmup_steps"] == plain_result["core_warmup_steps"] == 1
    [monitor] = rows_of(table, "monitor")[-1:]
    samples = int(re.match(r"(\d+) samples every 0.25 s", monitor["figures"]).group(1))
    assert samples >= 4
    computation, bandwidth = [r for r in rows_of(table, "base") if r["status"] == "passed"]
    assert re.search(r"tflops_fp32 [0-9.e+]+ TFLOP/s \(no datasheet entry\)",
                     computation["figures"]), computation
    assert re.search(r"bandwidth [0-9.e+]+ GB/s", bandwidth["figures"]), bandwidth
    [engine] = [r for r in rows_of(table, "inference") if r["status"] == "passed"]
    assert engine["what"].startswith("resnet50 through onnxruntime (CPU provider)")
    assert re.search(r"p99 [0-9.e+]+ ms, p50 [0-9.e+]+ ms per batch of 60 \(fp32\)",
                     engine["figures"]), engine
    finished = json.loads((work / "inference" / "onnxruntime" / "config.json").read_text())
    assert finished["compiler"] == "onnxruntime" and finished["weight_dir"] is None
    times = [row["seconds"] for row in table["rows"] if row["status"] == "passed"]
    assert all(isinstance(t, (int, float)) for t in times if t is not None)
    assert table["total_seconds"] >= sum(t for t in times if t is not None) * 0.9


# -- the bundle -------------------------------------------------------------------------------

def test_node_package_lists_and_what_the_bundle_asks_of_the_node(tmp_path):
    listing = tmp_path / "node.txt"
    listing.write_text("# a node\nJinja2==3.1.6\ntyping_extensions\nrich @ file:///x.whl\n\n")
    assert gpu_bundle.read_node_packages(listing) == {"jinja2": "3.1.6",
                                                      "typing-extensions": None, "rich": None}
    listing.write_text("torch==2.11.0\nnot a name!\n")
    with pytest.raises(gpu_bundle.BundleError, match=r"node.txt:2: 'not a name!' is not"):
        gpu_bundle.read_node_packages(listing)
    resolved = [{"name": "pydantic", "version": "2.14.4",
                 "requires_dist": ["typing-extensions>=4.14.1", "pydantic-core==2.50.5",
                                   "email-validator>=2.0.0; extra == 'email'",
                                   "tzdata; python_version >= '3.9' and platform_system == "
                                   "'Windows'"]},
                {"name": "pydantic_core", "version": "2.50.5",
                 "requires_dist": ["typing-extensions>=4.16.0"]},
                {"name": "Jinja2", "version": "3.1.6", "requires_dist": ["MarkupSafe>=2.0"]}]
    demands = gpu_bundle.node_demands(resolved, ["pydantic>=2.5", "jinja2>=3.1"],
                                      {"pydantic", "pydantic-core"}, "3.12")
    # Extras, other platforms' markers and bundled distributions ask nothing of the node; the
    # node's own distributions' requirements are the node's business.
    assert demands == {"jinja2": [">=3.1"], "typing-extensions": [">=4.14.1", ">=4.16.0"]}
    assert gpu_bundle.check_node_versions(demands, {"jinja2": "3.0.3",
                                                    "typing-extensions": None}) == [
        "the node's jinja2 3.0.3 does not satisfy >=3.1"]


def test_the_controller_s_requirements_take_ansible_core_for_ansible():
    requirements = gpu_bundle.controller_requirements(ROOT)
    names = [gpu_bundle.normalize(re.split(r"[ <>=~!;\[]", r, maxsplit=1)[0])
             for r in requirements]
    assert "ansible" not in names and "ansible-core" in names
    assert {"ansible-runner", "pydantic", "jinja2", "pyyaml"} <= set(names)


def test_the_bundle_for_the_gpu_node_stays_under_64_mib(tmp_path):
    """The preparing step for real: pip resolves and downloads from the package index."""
    out = tmp_path / "bundle"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_bundle.py"), "--out",
                           str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((out / gpu_bundle.MANIFEST).read_text())
    wheels = {gpu_bundle.normalize(w["file"].split("-")[0]): w["file"]
              for w in manifest["wheels"]}
    # What the node lacks, for its Python; nothing it has (torch, numpy, scipy, ...).
    assert {"ansible-core", "ansible-runner", "pydantic", "pydantic-core", "cryptography",
            "resolvelib", "jsonschema"} <= set(wheels)
    assert not {"torch", "numpy", "scipy", "matplotlib", "jinja2", "pyyaml"} & set(wheels)
    assert all(re.search(r"-(cp312-cp312|cp3\d+-abi3|py2\.py3-none|py3-none)-", f)
               for f in wheels.values()), wheels
    assert set(manifest["collections"]) == set(gpu_bundle.galaxy_dependencies(ROOT))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert size < 64 * 2**20
    assert f"MiB in {out}" in done.stdout


def wheel(folder: Path, name: str, requires: list[str]) -> Path:
    """A minimal wheel of package ``name`` 1.0 requiring ``requires`` (no build backend)."""
    dist = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 42\n",
             f"{dist}/METADATA": "Metadata-Version: 2.1\nName: " + name + "\nVersion: 1.0\n"
             + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join(record + [f"{dist}/RECORD,,"]) + "\n"
    target = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(target, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return target


def make_bundle(folder: Path, requires: list[str]) -> Path:
    (folder / gpu_bundle.WHEELS).mkdir(parents=True)
    wheel(folder / gpu_bundle.WHEELS, "gpucheck_probe", requires)
    (folder / gpu_bundle.MANIFEST).write_text(json.dumps(
        {"requirements": ["gpucheck-probe>=1.0"], "wheels": [], "collections": {}}))
    return folder


@pytest.fixture
def isolated(monkeypatch):
    """The install puts its folder on sys.path, PATH and PYTHONPATH: undone after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))


def test_the_bundle_installs_offline_and_every_requirement_is_checked(tmp_path, isolated):
    bundle = make_bundle(tmp_path / "good", ["packaging>=20"])
    site = tmp_path / "site"
    assert gpu_bundle.install_bundle(bundle, site).startswith("1 wheels and the collections into")
    import gpucheck_probe

    assert gpucheck_probe.VALUE == 42 and Path(gpucheck_probe.__file__).parent.parent == site
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(site)
    assert gpu_bundle.install_bundle(bundle, site).startswith("reused")
    # A requirement neither the node nor the bundle meets stops the check in one line.
    broken = make_bundle(tmp_path / "broken", ["no-such-dist>=1", "packaging>=999"])
    with pytest.raises(gpu_bundle.BundleError) as raised:
        gpu_bundle.install_bundle(broken, tmp_path / "site2")
    assert str(raised.value) == (
        "after installing the bundle: no-such-dist (needed by gpucheck_probe) is neither on "
        "this node nor in the bundle; packaging "
        f"{__import__('importlib.metadata').metadata.version('packaging')} does not satisfy "
        ">=999 (needed by gpucheck_probe): make the bundle with this node's pip list "
        "--format=freeze (make gpu-bundle NODE=FILE)")
    with pytest.raises(gpu_bundle.BundleError, match=r"no bundle at .*: make gpu-bundle on a "):
        gpu_bundle.install_bundle(tmp_path / "none", tmp_path / "site3")


def test_a_gpu_s_name_chooses_its_datasheet_and_the_gpu_half_s_cases_validate(
        monkeypatch, tmp_path):
    """The GPU half as far as this machine goes: NVML (a fake pynvml with hand-written H100
    values) names the device, its datasheet entry is chosen, and the cases the check hands to
    flagperf-ansible run, and the inference configuration, are what it says."""
    from test_vendor_monitors import NVML_VALUES, fake_pynvml

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(NVML_VALUES))
    name, info = gpu_check.detect_gpu()
    assert name == "NVIDIA H100 80GB HBM3"
    assert info == "driver 535.129.03, 80 GiB, the first of 2 GPUs"
    assert gpu_check.gpu_hardware(name) == ("H100", "")
    hardware, note = gpu_check.gpu_hardware("NVIDIA H100 PCIe")
    assert hardware == "H100" and note.startswith("NVIDIA H100 PCIe is not the board of "
                                                  "vendors/nvidia/vendor.yml's H100 datasheet")
    assert gpu_check.gpu_hardware("NVIDIA L40S") == (
        None, "NVIDIA L40S: no hardware of vendors/nvidia/vendor.yml (A100, H100, H200) "
              "matches it")
    mode = gpu_check.gpu_mode("H100")
    training = gpu_check.case_spec(mode, "resnet50", data_dir=ROOT / "data" / "digits")
    case_id, config, _ = gpu_check.effective(mode, training)
    assert case_id == "resnet50-pytorch-H100x1x1"
    # FlagPerf's 1x1 recipe (A100x1x1's batch and lr), not its 1x8 run's per-GPU batch of 32.
    assert (config["train_batch_size"], config["learning_rate"], config["train_crop_size"],
            config["precision"]) == (256, 0.8, 224, "fp32")
    images = gpu_check.train_images(config, mode)
    assert images == 25600 and gpu_check.planned_steps(config, images) == 100
    cases = [training, *(gpu_check.case_spec(mode, m, "base") for m in gpu_check.BASE_CASES)]
    extra = tmp_path / "cases.json"
    extra.write_text(json.dumps(gpu_check.run_vars(mode, cases, free_port())))
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "validate", "-i",
                           "inventories/local", "-e", f"@{extra}"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "inventories/local: ok: vendor nvidia, 3 round(s) on 1 host(s): "
        "resnet50-pytorch-H100x1x1, computation-pytorch-base-H100x1x1, "
        "main_memory-bandwidth-pytorch-base-H100x1x1")
    spec = gpu_check.case_spec(mode, "resnet50", "inference", ROOT / "data" / "digits")
    _, inference, contract = gpu_check.effective(mode, spec)
    assert (inference["batch_size"], inference["fp16"], inference["weight_dir"]) == (
        256, True, None)
    # 26 passes of the check's 1024 images: 104 batches, so the interpolated p99 lies below
    # the slowest batch (inductor's compile).
    batches = mode.val_images // inference["batch_size"] * inference["repeat"]
    assert batches == 104 and 0.99 * (batches - 1) <= batches - 2
    assert contract["target"]["metric"] == "final_acc_gap"


def test_the_deadline_stops_a_part_cleanly_and_skips_the_rest(tmp_path, monkeypatch):
    """A child past the deadline gets its signal and ends; one that ignores it is killed with
    its process group after the grace; a part with too little time left is skipped."""
    monkeypatch.setattr(gpu_check, "GRACE", 2.0)
    handler = ("import signal, sys, time\n"
               "signal.signal(signal.SIGINT, lambda *a: sys.exit(130))\n"
               "print('started', flush=True)\ntime.sleep(60)\n")
    deadline = gpu_check.Deadline(1.0)
    rc, stopped = gpu_check.run_child([sys.executable, "-c", handler], tmp_path / "a.log",
                                      deadline, stop_signal=signal.SIGINT)
    assert (rc, stopped) == (130, True)       # its handler's status: the signal reached it
    assert (tmp_path / "a.log").read_text() == "started\n"
    stubborn = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "time.sleep(60)\n")
    rc, stopped = gpu_check.run_child([sys.executable, "-c", stubborn], tmp_path / "b.log",
                                      gpu_check.Deadline(1.0))
    assert (rc, stopped) == (-signal.SIGKILL, True)
    check = gpu_check.Check(argparse.Namespace(deadline=0.0, work=tmp_path, bundle=tmp_path,
                                               master_port=29500, install_only=False))
    assert check.time_left("inference", "an engine") is False
    assert [(r.part, r.status, r.figures) for r in check.rows] == [
        ("inference", "skipped", "deadline reached (0 s)")]
    assert not check.failed
