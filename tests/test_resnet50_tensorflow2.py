"""The resnet50 case on TensorFlow 2 (benchmarks/resnet50/tensorflow2) and its data format
``imagenet_tfrecord``: the TFRecords written without TensorFlow read back by TensorFlow (every
feature, the same images as the ``imagenet`` format, the label offset the case applies), the
stdlib checker rejecting broken files, Keras' ResNet50 against its published parameter count
and the case's FLOPs, and two workers of the cpu profile as the ``tf_config`` launcher starts
them (MultiWorkerMirroredStrategy on 127.0.0.1) whose trained samples sum both. The profile's
one-worker round to its target is the local run's (tests/test_local_run.py checks its events).

TensorFlow runs in its own interpreter (the ``framework_python`` fixture), never in this process.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import struct
import subprocess
from pathlib import Path

import google_crc32c
import numpy as np
import pytest
import yaml
from PIL import Image

import host_side
from case_model import ROOT, torch_finished_keys
from test_flop_counts import resnet50_v1_multiply_adds
from flagperf_ansible import datasets
from flagperf_ansible.datasets.imagenet_tfrecord import (encode_example, shard_name,
                                                         write_tfrecord)
from flagperf_ansible.config.launchers import launch_argv, launch_env
from flagperf_ansible.results.perflog import parse_rank_log
from flagperf_host.readers.tfrecord import crc32c

CASE = ROOT / "benchmarks" / "resnet50" / "tensorflow2"
STANDARD = yaml.safe_load((CASE / "config" / "standard.yaml").read_text())["params"]
PROFILE = {**STANDARD, **yaml.safe_load((CASE / "config" / "cpu.yaml").read_text())["params"]}
#: The FINISHED keys of the pytorch resnet50 case's cpu round (driver/torch/trainer.py).
TORCH_FINISHED_KEYS = torch_finished_keys("acc1")
#: keras.applications.ResNet50 with its 1000-class head at 224x224 (Keras applications table:
#: 25.6M parameters), BatchNorm's moving statistics included.
RESNET50_PARAMETERS = 25_636_712

# Run in the TensorFlow interpreter: every record of both splits parsed as tf.train.Example, the
# validation images decoded, and the case's own parse() on the first training record.
READ_BACK = """
import json, sys
from pathlib import Path
import numpy as np
import tensorflow as tf
sys.path[:0] = [sys.argv[2]]  # benchmarks/, as the launch's PYTHONPATH
from resnet50.tensorflow2 import imagenet_records as R
data, out = Path(sys.argv[3]), Path(sys.argv[4])
found = {}
for split in R.SPLITS:
    files = R.shard_files(data, split)
    rows = []
    for path in files:
        counted = R.count_records(path)
        seen = 0
        for record in tf.data.TFRecordDataset(str(path)):
            seen += 1
            feature = tf.train.Example.FromString(record.numpy()).features.feature
            values = {}
            for name, value in feature.items():
                kind = value.WhichOneof("kind")
                listed = list(getattr(value, kind).value)
                if kind == "bytes_list":
                    listed = [v.hex() if name == "image/encoded" else v.decode() for v in listed]
                values[name] = [kind] + listed
            rows.append(values)
        assert seen == counted, (path, seen, counted)
    found[split] = {"files": [p.name for p in files], "rows": rows}
images = [tf.io.decode_image(bytes.fromhex(r["image/encoded"][1]), channels=3).numpy()
          for r in found["validation"]["rows"]]
np.save(out / "validation.npy", np.stack(images))
first = next(iter(tf.data.TFRecordDataset(str(R.shard_files(data, "train")[0]))))
image, label = R.parse(first)
found["parsed"] = {"shape": list(image.shape), "dtype": image.dtype.name, "label": int(label)}
json.dump(found, open(out / "found.json", "w"))
"""

# Run in the TensorFlow interpreter: the case's model at 224x224 with 1000 classes (and the
# cpu profile's), its multiply-adds summed over Conv2D and Dense layers, zero-init and momentum.
MODEL_PROBE = """
import json, sys
sys.path[:0] = [sys.argv[2]]  # benchmarks/, as the launch's PYTHONPATH
import keras
from resnet50.tensorflow2 import model as M
def macs(model):
    total = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            height, width, channels = layer.output.shape[1:]
            rows, columns = layer.kernel_size
            total += height * width * channels * rows * columns * layer.input.shape[-1]
        elif isinstance(layer, keras.layers.Dense):
            total += layer.input.shape[-1] * layer.units
    return total
config = {"image_size": 224, "bn_momentum": 0.9, "zero_init_residual": True,
          "kernel_init": "he_normal"}
big = M.build_model(config, 1000)
small = M.build_model({**config, "image_size": 32}, 10)
norms = [l for l in big.layers if isinstance(l, keras.layers.BatchNormalization)]
zeroed = sorted(l.name for l in norms if not l.gamma.numpy().any())
json.dump({"parameters": M.parameter_count(big), "macs": macs(big),
           "small_parameters": M.parameter_count(small), "small_macs": macs(small),
           "momenta": sorted({l.momentum for l in norms}), "zeroed": zeroed,
           "penalised": len(M.penalised_weights(big)), "output": list(big.output.shape),
           "conv_std": float(big.get_layer("conv4_block1_2_conv").kernel.numpy().std()),
           "dense_std": float(big.get_layer("predictions").kernel.numpy().std()),
           "distinct": bool((big.get_layer("conv4_block2_2_conv").kernel.numpy()
                             != big.get_layer("conv4_block3_2_conv").kernel.numpy()).any())},
          sys.stdout)
"""


@pytest.fixture(scope="module")
def tf_python(framework_python) -> Path:
    return framework_python("tensorflow2")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("imagenet_tfrecord")
    assert datasets.prepare("imagenet_tfrecord", root) == {"train": 1437, "validation": 360}
    return root


def tf_run(python: Path, script: str, *args: str, timeout: float = 300) -> str:
    done = subprocess.run([str(python), "-c", script, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# --- the data format -------------------------------------------------------------------------

def test_crc32c_of_the_stdlib_checker_is_google_crc32c():
    assert crc32c(b"123456789") == 0xE3069283  # RFC 3720's check value
    rng = random.Random(0)
    for size in (0, 1, 7, 8, 255, 4096):
        data = bytes(rng.randrange(256) for _ in range(size))
        assert crc32c(data) == google_crc32c.value(data)


def test_tensorflow_reads_back_every_feature_and_the_imagenet_formats_images(
        tf_python, tiny, digits_dir, tmp_path):
    tf_run(tf_python, READ_BACK, CASE, ROOT / "benchmarks", tiny, tmp_path)
    found = json.loads((tmp_path / "found.json").read_text())
    assert found["train"]["files"] == [shard_name("train", i, 4) for i in range(4)]
    assert found["validation"]["files"] == [shard_name("validation", i, 2) for i in range(2)]
    for split, folder in (("train", "train"), ("validation", "val")):
        rows = found[split]["rows"]
        pngs = {(p.parent.name, p.name): p for p in (digits_dir / folder).glob("*/*.png")}
        assert len(rows) == len(pngs) == {"train": 1437, "validation": 360}[split]
        for row in rows:
            digit = row["image/class/synset"][1]
            assert row["image/class/label"] == ["int64_list", int(digit) + 1]  # 1-based
            assert row["image/format"] == ["bytes_list", "PNG"]
            assert row["image/height"] == row["image/width"] == ["int64_list", 8]
            png = pngs.pop((digit, row["image/filename"][1]))
            assert bytes.fromhex(row["image/encoded"][1]) == png.read_bytes()
        assert not pngs  # every image of the imagenet format, once
    # decode_image gives the pixels the pytorch case's loader gives (PIL, RGB)
    decoded = np.load(tmp_path / "validation.npy")
    expected = np.stack([np.asarray(Image.open(
        digits_dir / "val" / row["image/class/synset"][1] / row["image/filename"][1])
        .convert("RGB")) for row in found["validation"]["rows"]])
    assert decoded.shape == (360, 8, 8, 3) and np.array_equal(decoded, expected)
    first = found["train"]["rows"][0]
    assert found["parsed"] == {"shape": [8, 8, 3], "dtype": "uint8",
                               "label": first["image/class/label"][1] - 1}


def test_the_generator_is_deterministic_and_idempotent(tiny, tmp_path):
    again = tmp_path / "again"
    datasets.prepare("imagenet_tfrecord", again)
    for path in tiny.rglob("*"):
        if path.is_file():
            assert (again / path.relative_to(tiny)).read_bytes() == path.read_bytes(), path
    stamp = (again / "train" / shard_name("train", 0, 4)).stat().st_mtime_ns
    datasets.prepare("imagenet_tfrecord", again)  # .complete markers: nothing rewritten
    assert (again / "train" / shard_name("train", 0, 4)).stat().st_mtime_ns == stamp


def test_the_checker_accepts_flat_shards_and_rejects_broken_ones(tiny, tmp_path):
    root = Path(shutil.copytree(tiny, tmp_path / "data"))
    assert datasets.check("imagenet_tfrecord", root) == []
    first = root / "train" / shard_name("train", 0, 4)
    # Flat at the root, as official resnet's get_filenames lists them: accepted.
    flat = Path(shutil.copytree(tiny, tmp_path / "flat"))
    for path in list(flat.glob("*/*-of-*")):
        path.rename(flat / path.name)
    assert datasets.check("imagenet_tfrecord", flat) == []

    data = bytearray(first.read_bytes())
    data[20] ^= 0xFF  # a byte of the first record's data
    first.write_bytes(bytes(data))
    assert datasets.check("imagenet_tfrecord", root) == [
        "train/train-00000-of-00004: the first record's data CRC does not match"]
    first.write_bytes(b"not a tfrecord file at all")
    assert datasets.check("imagenet_tfrecord", root) == [
        "train/train-00000-of-00004: the first record's length CRC does not match: not a "
        "TFRecord file"]
    whole = (tiny / "train" / shard_name("train", 0, 4)).read_bytes()
    first.write_bytes(whole[:100])
    (length,) = struct.unpack("<Q", whole[:8])
    assert datasets.check("imagenet_tfrecord", root) == [
        f"train/train-00000-of-00004: truncated: the first record has {length} bytes, 88 "
        "follow its header"]
    write_tfrecord(first, [encode_example({"image/encoded": whole[16:40],
                                           "image/class/label": 0})])
    assert datasets.check("imagenet_tfrecord", root) == [
        "train/train-00000-of-00004: the first record's image/encoded is not an image file",
        "train/train-00000-of-00004: the first record's image/class/label is 0: labels are "
        "1-based (ImageNet's 1..1000; the loaders subtract 1)"]
    write_tfrecord(first, [encode_example({"image/format": "PNG"})])
    assert datasets.check("imagenet_tfrecord", root)[0] == (
        "train/train-00000-of-00004: the first record has no bytes image/encoded (it has: "
        "image/format)")
    first.unlink()
    (root / "validation" / shard_name("validation", 1, 2)).rename(
        root / "validation" / shard_name("validation", 1, 3))
    shutil.rmtree(root / "train")
    assert datasets.check("imagenet_tfrecord", root) == [
        "no train shards (train/train-00000-of-NNNNN, or train-00000-of-NNNNN at the root)",
        "validation/: shards of different totals (of-00002, of-00003)"]


def test_the_checker_runs_on_a_bare_python3(tiny):
    """``python3 -m flagperf_host.data_check`` from the host archive, without site packages."""
    python, *rest = host_side.command("data_check", "imagenet_tfrecord", str(tiny))
    done = subprocess.run([python, "-S", *rest], env=host_side.env(), capture_output=True,
                          text=True, cwd="/")
    assert (done.returncode, done.stdout) == (0, "")


# --- the model -------------------------------------------------------------------------------

def test_keras_resnet50_counts_as_published_and_as_the_case_declares(tf_python):
    found = json.loads(tf_run(tf_python, MODEL_PROBE, CASE, ROOT / "benchmarks"))
    assert found["parameters"] == RESNET50_PARAMETERS
    assert found["output"] == [None, 1000]
    # Keras' layers summed here, torch's counter on the same v1 network there: the same count.
    assert found["macs"] == resnet50_v1_multiply_adds(224, 1000)
    assert found["small_macs"] == resnet50_v1_multiply_adds(32, 10)
    # case.yml's MFU: 3 x 2 FLOPs per multiply-add at 224x224, scaled by the image area
    flops = yaml.safe_load((CASE / "case.yml").read_text())["mfu"]["flops_per_unit"]
    assert flops["value"] == pytest.approx(6 * found["macs"], rel=1e-4)
    assert 6 * found["small_macs"] == pytest.approx(flops["value"] * (32 / 224) ** 2, rel=1e-3)
    assert found["small_parameters"] == 23_608_202  # the cpu profile's: 10 classes at 32x32
    assert found["momenta"] == [0.9]
    assert len(found["zeroed"]) == 16 and all(n.endswith("_3_bn") for n in found["zeroed"])
    assert found["penalised"] == 53 + 1  # every convolution and the classifier
    # tensorflow/models' initialisation: He-normal, sqrt(2 / fan_in) with fan_in 3 x 3 x 256
    assert found["conv_std"] == pytest.approx((2 / (3 * 3 * 256)) ** 0.5, rel=0.03)
    assert found["dense_std"] == pytest.approx(0.01, rel=0.03)
    assert found["distinct"]  # two kernels of one shape are drawn apart


# Run in the TensorFlow interpreter: the case's learning rate at the given updates.
SCHEDULE_PROBE = """
import json, sys
sys.path[:0] = [sys.argv[2]]  # benchmarks/, as the launch's PYTHONPATH
from resnet50.tensorflow2 import training as R
args = json.loads(sys.argv[3])
schedule = R.LearningRate(**args["schedule"])
json.dump([float(schedule(step)) for step in args["steps"]], sys.stdout)
"""


def test_the_standard_schedule_is_upstreams_on_a100_1x8(tf_python):
    """tensorflow/models' stepwise schedule as FlagPerf configures it: 0.1 x 1024 / 256 = 0.4 for
    a global batch of 8 x 128, a linear warmup from 0 over 5 epochs, then x0.1 at epochs 30, 60
    and 80 (1251 updates an epoch: 1281167 // 1024)."""
    epoch = STANDARD["num_train_examples"] // (8 * STANDARD["train_batch_size"])
    peak = STANDARD["learning_rate"] * 8 * STANDARD["train_batch_size"] / STANDARD["lr_scale_batch"]
    schedule = {"peak": peak, "kind": STANDARD["lr_scheduler"],
                "warmup_steps": STANDARD["lr_warmup_epochs"] * epoch,
                "warmup_decay": STANDARD["lr_warmup_decay"], "total_steps": 90 * epoch,
                "boundaries": [b * epoch for b in STANDARD["lr_boundaries"]],
                "multipliers": STANDARD["lr_multipliers"]}
    steps = [0, 5 * epoch // 2, 5 * epoch, 30 * epoch - 1, 30 * epoch, 60 * epoch, 80 * epoch,
             90 * epoch]
    rates = json.loads(tf_run(tf_python, SCHEDULE_PROBE, CASE, ROOT / "benchmarks",
                              json.dumps({"schedule": schedule, "steps": steps})))
    assert epoch == 1251 and peak == pytest.approx(0.4)
    halfway = 0.4 * steps[1] / (5 * epoch)  # the warmup's line
    assert rates == pytest.approx([0.0, halfway, 0.4, 0.4, 0.04, 0.004, 0.0004, 0.0004],
                                  rel=1e-5)


# --- cpu profile rounds through the tf_config launcher ---------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_round(python: Path, data: Path, tmp_path: Path, nodes: int,
              config: dict, timeout: float = 300) -> list[Path]:
    """Run a round of the case as its nodes would, all on 127.0.0.1 (launchers.launch_argv and
    launch_env of ``tf_config``: TF_CONFIG with one port per worker); returns each node's
    output folder."""
    round_ = {"launcher": "tf_config", "entry": None,
              "case_dir": "benchmarks/resnet50/tensorflow2", "model": "resnet50",
              "framework": "tensorflow2", "nnodes": nodes,
              "nproc_per_node": 1, "nodes": ["127.0.0.1"] * nodes,
              "master_addr": "127.0.0.1", "env": {}, "vendor_dir": "vendors/cpu"}
    port = free_port() if nodes == 1 else _free_port_pair()
    started = []
    for noderank in range(nodes):
        output = tmp_path / f"node{noderank}"
        output.mkdir()
        (output / "config.yaml").write_text(yaml.safe_dump(config))
        argv = launch_argv(round_, noderank, str(python), str(ROOT), str(output), str(data), port)
        env = {**os.environ, **launch_env(round_, noderank, str(ROOT), port)}
        log = open(output / "launcher.log", "wb")
        started.append((output, log, subprocess.Popen(
            argv, cwd=output, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)))
    try:
        codes = [process.wait(timeout=timeout) for _, _, process in started]
    finally:
        for _, log, process in started:
            if process.poll() is None:
                os.killpg(process.pid, 9)
            log.close()
    logs = "\n".join(path.read_text()[-3000:] for output, _, _ in started
                     for path in sorted(output.glob("*.log")))
    assert codes == [0] * nodes, logs
    return [output for output, _, _ in started]


def _free_port_pair() -> int:
    """A port whose next one up is free too (the second worker on the same address takes it)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")


def events(output: Path, rank: int) -> list[dict]:
    return parse_rank_log(output / f"rank{rank}.out.log").events


def test_two_workers_under_tf_config_sum_their_samples(tf_python, tiny, tmp_path):
    config = {**PROFILE, "epochs": 1, "max_steps": 2, "log_freq": 1, "intra_op_threads": 1,
              "inter_op_threads": 1}
    outputs = run_round(tf_python, tiny, tmp_path, 2, config, timeout=240)
    finished = [events(output, rank)[-1] for rank, output in enumerate(outputs)]
    assert all(e["event"] == "FINISHED" and e["metadata"]["rank"] == rank
               for rank, e in enumerate(finished))
    first, second = (e["value"] for e in finished)
    assert set(first) == TORCH_FINISHED_KEYS
    assert first["world_size"] == second["world_size"] == 2
    assert first["global_steps"] == second["global_steps"] == 2
    # 32 images per worker per update, two workers: the sum over both
    assert first["num_trained_samples"] == second["num_trained_samples"] == 2 * 32 * 2
    # one top-1 over the 360 validation images, summed over the workers' halves
    assert first["final_acc1"] == second["final_acc1"]
    assert round(first["final_acc1"] * 360 / 100, 6).is_integer()
    steps = [e["value"]["num_trained_samples"] for e in events(outputs[0], 0)
             if e["event"] == "STEP_END"]
    assert steps == [64, 128]
