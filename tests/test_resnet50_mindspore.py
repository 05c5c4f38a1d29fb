"""The resnet50 case on MindSpore (benchmarks/resnet50/mindspore): mindcv's resnet50 against
torchvision's (parameter count and shapes), the ImageNet-folder reader against the pytorch
case's, the learning-rate schedule against the pytorch case's, and two data-parallel workers of
the cpu profile through the msrun launcher's command (MCCL on CPU) whose trained samples sum both
ranks. The profile's one-worker round to its target is the local run's (tests/test_local_run.py
checks its events).

MindSpore runs in its own interpreter (the ``framework_python`` fixture), never in this
process; torch and torchvision run here. msrun starts its workers as ``python`` found on PATH
(``launchers.Msrun``), so the rounds put that interpreter's folder first on PATH."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
import yaml

from case_model import ROOT, case_module, torch_finished_keys
from driver.torch.classification import eval_transform, image_folder, lr_factor
from driver.torch.trainer import TrainingPlan
from flagperf_ansible.config.launchers import launch_argv, launch_env
from flagperf_ansible.results.perflog import parse_rank_log

CASE = ROOT / "benchmarks" / "resnet50" / "mindspore"
STANDARD = yaml.safe_load((CASE / "config" / "standard.yaml").read_text())["params"]
PROFILE = {**STANDARD, **yaml.safe_load((CASE / "config" / "cpu.yaml").read_text())["params"]}
#: The FINISHED keys of the pytorch resnet50 case's cpu round (driver/torch/trainer.py).
TORCH_FINISHED_KEYS = torch_finished_keys("acc1")
#: ResNet-50 with 1000 classes (torchvision's resnet50: He et al. 2016, v1.5).
RESNET50_PARAMETERS = 25_557_032

schedule = case_module("resnet50", "schedule", "mindspore")

# Run in the MindSpore interpreter: the model's trainable parameter shapes (1000 classes, and 10
# with zero_init_residual), and the reader's validation images and training batches.
PROBE = """
import json, os, sys
import numpy as np
sys.path[:0] = [sys.argv[5]]  # benchmarks/, as the launch's PYTHONPATH
from resnet50.mindspore import imagenet_folders as F
from resnet50.mindspore.model import build_model, trainable_parameters
data, out, config = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
net = build_model({}, 1000)
tiny = build_model({"zero_init_residual": True}, 10)
zero = [p.name for p in tiny.trainable_params()
        if p.name.endswith("gamma") and not p.asnumpy().any()]
images, labels = [], []
for world in (1, 2):
    for rank in range(world):
        for x, y in F.val_dataset(data, config, rank, world).create_tuple_iterator(
                output_numpy=True, num_epochs=1):
            images.append(x), labels.append(y)
np.save(out + "/val.npy", np.concatenate(images))
np.save(out + "/val_labels.npy", np.concatenate(labels))
train = F.train_dataset(data, config, 1, 2)
x, y = next(train.create_tuple_iterator(output_numpy=True, num_epochs=1))
json.dump({"parameters": trainable_parameters(net), "tiny": trainable_parameters(tiny),
           "shapes": [list(p.shape) for p in net.trainable_params()], "zero": zero,
           "classes": F.class_names(data), "train_batches": train.get_dataset_size(),
           "train_batch": [list(x.shape), str(x.dtype), list(y.shape), str(y.dtype)],
           "train_range": [float(x.min()), float(x.max())]}, open(out + "/probe.json", "w"))
sys.stdout.flush()
os._exit(0)  # past MindSpore's Cell.__del__ noise at exit
"""


@pytest.fixture(scope="module")
def ms_python(framework_python) -> Path:
    return framework_python("mindspore")


@pytest.fixture(scope="module")
def probe(ms_python, digits_dir, tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("probe")
    done = subprocess.run([str(ms_python), "-c", PROBE, str(CASE), str(digits_dir), str(out),
                           json.dumps(PROFILE), str(ROOT / "benchmarks")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "probe.json").read_text()), out


# --- model -----------------------------------------------------------------------------------

def test_mindcv_resnet50_is_torchvisions_resnet50(probe):
    found, _ = probe
    reference = torchvision.models.resnet50()
    assert found["parameters"] == RESNET50_PARAMETERS == sum(
        p.numel() for p in reference.parameters())
    # The same tensors: convolutions [out, in, kh, kw] and the classifier [out, in] in both.
    assert sorted(found["shapes"]) == sorted(list(p.shape) for p in reference.parameters())
    assert found["tiny"] == RESNET50_PARAMETERS - 2049 * 990  # a 10-class head
    # zero_init_residual: the gamma of the last BatchNorm of each of the 16 bottlenecks, no other
    assert len(found["zero"]) == 16 and all(n.endswith(".bn3.gamma") for n in found["zero"])


# --- data ------------------------------------------------------------------------------------

def test_reader_gives_the_pytorch_cases_validation_images(probe, digits_dir):
    """One rank reads what torchvision's ImageFolder gives, in its order (bilinear resampling
    within one grey level); two ranks read every image once."""
    found, out = probe
    images, labels = np.load(out / "val.npy"), np.load(out / "val_labels.npy")
    theirs = image_folder(digits_dir / "val", eval_transform(PROFILE), cache=False)
    assert found["classes"] == theirs.classes == [str(d) for d in range(10)]
    assert images.shape == (2 * len(theirs), 3, 32, 32) and images.dtype == np.float32
    expected = torch.stack([theirs[i][0] for i in range(len(theirs))]).numpy()
    one = images[:len(theirs)]
    assert np.abs(one - expected).max() <= 2 / 255 + 1e-6  # 1 of 255 levels, normalised by 0.5
    assert labels[:len(theirs)].tolist() == list(theirs.targets)
    # rank 0 then rank 1 of two: every image once (rank r reads every 2nd from r)
    two = images[len(theirs):]
    order = list(range(0, len(theirs), 2)) + list(range(1, len(theirs), 2))
    assert np.array_equal(two, one[order])


def test_reader_shards_training_batches(probe):
    found, _ = probe
    # 1437 images over 2 shards (719 each, padded), whole batches of 32
    assert found["train_batches"] == 719 // 32
    assert found["train_batch"] == [[32, 3, 32, 32], "float32", [32], "int32"]
    low, high = found["train_range"]
    assert low == -1.0 and high == 1.0  # normalised with mean 0.5, std 0.5, black padding


# --- schedule --------------------------------------------------------------------------------

@pytest.mark.parametrize("config, steps_per_epoch, total", [
    (PROFILE, 44, 88), (STANDARD, 5004, 500400), ({**PROFILE, "lr_min": 0.001}, 44, 352)])
def test_schedule_is_the_pytorch_cases(config, steps_per_epoch, total):
    plan = TrainingPlan(steps_per_epoch=steps_per_epoch, total_steps=total, global_batch_size=32)
    ours = schedule.per_update(steps_per_epoch, total, config)
    for step in sorted({0, 1, 21, 22, 43, 44, total // 2, total - 1, 30 * steps_per_epoch}):
        if step < total:
            expected = config["learning_rate"] * lr_factor(step, plan, config)
            assert ours[step] == pytest.approx(expected, rel=1e-12), step
    with pytest.raises(ValueError, match="config lr_scheduler: 'poly'"):
        schedule.check({**config, "lr_scheduler": "poly"})


# --- cpu profile rounds through msrun ----------------------------------------------------------

def run_round(python: Path, data: Path, tmp_path: Path, nproc: int,
              config: dict) -> tuple[Path, str]:
    """Run the cpu profile as a round's node would (launchers.launch_argv/launch_env for the
    ``msrun`` launcher); returns the output folder and msrun's output."""
    output = tmp_path / "out"
    output.mkdir()
    (output / "config.yaml").write_text(yaml.safe_dump(config))
    round_ = {"launcher": "msrun", "entry": None, "case_dir": "benchmarks/resnet50/mindspore",
              "model": "resnet50", "framework": "mindspore", "nnodes": 1, "nproc_per_node": nproc, "master_addr": "127.0.0.1",
              "vendor_dir": "vendors/cpu"}
    argv = launch_argv(round_, 0, str(python), str(ROOT), str(output), str(data), 28431)
    env = {**os.environ, **launch_env(round_, 0, str(ROOT), 28431),
           "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    logs = "\n".join(p.read_text() for p in sorted(output.glob("rank*.out.log")))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:] + logs[-3000:]
    return output, done.stdout + done.stderr


def events(output: Path, rank: int = 0) -> list[dict]:
    return parse_rank_log(output / f"rank{rank}.out.log").events


def test_two_workers_under_msrun_sum_their_samples(ms_python, digits_dir, tmp_path):
    """Two data-parallel workers on CPU (MCCL), for 2 updates: each rank's FINISHED, the samples
    of both, the same accuracy (counts summed over the ranks) and msrun's clean exit (its
    scheduler, the entry run once more, trains nothing: one INIT_START per rank log)."""
    config = {**PROFILE, "max_steps": 2, "log_freq": 1}
    output, _ = run_round(ms_python, digits_dir, tmp_path, nproc=2, config=config)
    finished = [events(output, rank)[-1] for rank in (0, 1)]
    assert all(e["event"] == "FINISHED" for e in finished)
    first, second = (e["value"] for e in finished)
    assert first["world_size"] == second["world_size"] == 2
    assert first["global_steps"] == second["global_steps"] == 2
    assert first["num_trained_samples"] == second["num_trained_samples"] == 2 * 32 * 2
    assert first["final_acc1"] == second["final_acc1"]
    for rank in (0, 1):
        assert [e["event"] for e in events(output, rank)].count("INIT_START") == 1
    ddp = [e for e in events(output) if e["event"] == "MODEL_TO_DDP"]
    assert ddp and ddp[0]["value"] == {"world_size": 2}
    assert (output / "msrun_log" / "scheduler.log").is_file()
