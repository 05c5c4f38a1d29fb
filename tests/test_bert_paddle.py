"""The bert case on PaddlePaddle (benchmarks/bert/paddle): its model's parameters against the
pytorch case's (BERT-large's count, every name and shape), the converted checkpoint read without
torch and giving the pytorch model's masked-LM scores, the hdf5 reader against the pytorch
case's, and two processes (gloo on CPU) through the paddle launcher's command whose trained
samples sum both ranks. The cpu profile trains to its target once, in the local run
(tests/test_local_run.py, check_paddle_round).

Paddle runs in its own interpreter (the ``framework_python`` fixture), never in this process;
the torch side runs here. The checkpoint reader and the hdf5 reader import no framework and are
imported here directly."""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml

from case_model import ROOT, case_model, case_module
from flagperf_ansible import datasets
from flagperf_ansible.config.launchers import launch_argv, launch_env
from flagperf_ansible.results.perflog import parse_rank_log

CASE = ROOT / "benchmarks" / "bert" / "paddle"
STANDARD = yaml.safe_load((CASE / "config" / "standard.yaml").read_text())["params"]
PROFILE = {**STANDARD, **yaml.safe_load((CASE / "config" / "cpu.yaml").read_text())["params"]}
TORCH_CASE = ROOT / "benchmarks" / "bert" / "pytorch"
TORCH_PROFILE = {**yaml.safe_load((TORCH_CASE / "config" / "standard.yaml").read_text())["params"],
                 **yaml.safe_load((TORCH_CASE / "config" / "cpu.yaml").read_text())["params"]}
#: BERT-large as the pytorch case counts it (tests/test_bert_case.py), vocabulary 30528.
BERT_LARGE_PARAMETERS = 336_232_258

torch_checkpoint = case_module("bert", "torch_checkpoint", "paddle")
shards = case_module("bert", "shards", "paddle")
common = importlib.import_module("bert.common")  # the shards and checks both cases share
torch_entry = case_module("bert", "training")

# Run in the paddle interpreter: BERT-large's parameters under paddle.LazyGuard (shapes only,
# nothing materialised), the cpu profile's model with its checkpoint loaded, its parameter
# names and shapes, and its scores on the first 8 evaluation sequences.
PROBE = """
import json, sys
import numpy as np
sys.path[:0] = [sys.argv[2]]  # benchmarks/, as the launch's PYTHONPATH
import paddle
from bert import common as S
from bert.paddle import model as M
large, tiny = json.loads(sys.argv[3]), json.loads(sys.argv[4])
data, out = sys.argv[5], sys.argv[6]
with paddle.LazyGuard():
    large_model = M.build_model(large)
    counted = M.parameter_count(large_model)
materialised = sum(bool(p._is_initialized()) for p in large_model.parameters())
model = M.build_model(tiny, data)
model.eval()
rows = S.BertShards(data + "/" + S.EVAL_DIR, tiny["max_seq_length"],
                    tiny["max_predictions_per_seq"])
collated = S.collate([rows[i] for i in range(8)])
labels = S.masked_labels(collated["masked_lm_ids"], collated["masked_lm_positions"])
batch = {k: paddle.to_tensor(v) for k, v in collated.items()}
with paddle.no_grad():
    mlm, nsp = model(batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                     batch["masked_lm_positions"])
    loss = M.pretraining_loss(mlm, nsp, paddle.to_tensor(labels), batch["next_sentence_labels"])
np.save(out + "/mlm.npy", mlm.numpy())
np.save(out + "/nsp.npy", nsp.numpy())
json.dump({"large": counted, "large_materialised": materialised, "tiny": M.parameter_count(model),
           "loss": float(loss),
           "shapes": {n: list(p.shape) for n, p in model.named_parameters()},
           "linear": sorted(M.linear_weights(model))}, open(out + "/probe.json", "w"))
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mlperf_bert_hdf5")
    datasets.prepare("mlperf_bert_hdf5", root)
    return root


@pytest.fixture(scope="module")
def paddle_python(framework_python) -> Path:
    return framework_python("paddle")


@pytest.fixture(scope="module")
def probe(paddle_python, tiny, tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("probe")
    done = subprocess.run(
        [str(paddle_python), "-c", PROBE, str(CASE), str(ROOT / "benchmarks"),
         json.dumps(STANDARD), json.dumps(PROFILE), str(tiny), str(out)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "probe.json").read_text()), out


def torch_model(tiny: Path):
    """The pytorch case's model for the cpu profile, from the same checkpoint, in eval mode."""
    return case_model("bert").build_model(TORCH_PROFILE, tiny).eval()


# --- model ---------------------------------------------------------------------------------

def test_bert_large_counts_as_the_pytorch_case(probe):
    found, _ = probe
    assert found["large"] == BERT_LARGE_PARAMETERS  # the tied decoder counted once
    assert found["large_materialised"] == 0  # LazyGuard: shapes only, no weights made


def test_parameters_are_the_pytorch_models_by_name_and_shape(probe, tiny):
    """Every paddle parameter is the pytorch model's of the same name (its tied copies aside),
    Linear weights transposed: the layout is transformers' BertForPreTraining."""
    found, _ = probe
    model = torch_model(tiny)
    tied = case_model("bert").NOT_IN_CHECKPOINT + ("cls.predictions.decoder.weight",)
    expected = {name: list(tensor.shape) for name, tensor in model.state_dict().items()
                if name not in tied}
    linear = set(found["linear"])
    shapes = {name: shape[::-1] if name in linear else shape
              for name, shape in found["shapes"].items()}
    assert shapes == expected
    assert found["tiny"] == sum(p.numel() for p in model.parameters())
    assert linear == {f"{name}.weight" for name, module in model.named_modules()
                      if isinstance(module, torch.nn.Linear)} - set(tied)


# --- checkpoint ----------------------------------------------------------------------------

def test_checkpoint_read_without_torch_equals_torch_load(tiny):
    path = tiny / PROFILE["init_checkpoint"]
    ours = torch_checkpoint.load(path)["model"]
    theirs = torch.load(path, map_location="cpu", weights_only=True)["model"]
    assert list(ours) == list(theirs)
    for key, tensor in theirs.items():
        assert ours[key].dtype == np.float32 and np.array_equal(ours[key], tensor.numpy()), key


def test_checkpoint_reader_rebuilds_views_and_dtypes(tmp_path):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    saved = {"view": base[1:, ::2], "transposed": base.t(), "scalar": torch.tensor(3.5),
             "half": base.half()[0], "bf16": base.bfloat16()[1], "long": torch.arange(5),
             "nested": [torch.ones(2)], "empty": torch.zeros(0, 3)}
    torch.save(saved, tmp_path / "views.pt")
    ours = torch_checkpoint.load(tmp_path / "views.pt")
    for key in ("view", "transposed", "scalar", "half", "long", "empty"):
        assert np.array_equal(ours[key], saved[key].numpy()), key
        assert ours[key].shape == tuple(saved[key].shape), key
    assert np.array_equal(ours["bf16"], saved["bf16"].float().numpy())
    assert np.array_equal(ours["nested"][0], np.ones(2, np.float32))


class _Payload:
    def __reduce__(self):
        import os
        return os.system, ("touch should-not-exist",)


def test_checkpoint_reader_refuses_code_and_short_storages(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with zipfile.ZipFile(tmp_path / "evil.pt", "w") as archive:
        archive.writestr("evil/data.pkl", pickle.dumps({"model": _Payload()}, protocol=2))
    with pytest.raises(torch_checkpoint.CheckpointError, match=r"evil\.pt: refuses to load "
                       r"(posix|os|nt)\.system"):
        torch_checkpoint.load(tmp_path / "evil.pt")
    assert not (tmp_path / "should-not-exist").exists()

    torch.save({"w": torch.ones(8)}, tmp_path / "whole.pt")
    with zipfile.ZipFile(tmp_path / "whole.pt") as whole, \
            zipfile.ZipFile(tmp_path / "short.pt", "w") as short:
        for item in whole.infolist():
            data = whole.read(item)
            short.writestr(item, data[:16] if item.filename.endswith("data/0") else data)
    with pytest.raises(torch_checkpoint.CheckpointError, match=r"short\.pt: storage 0 holds 16"):
        torch_checkpoint.load(tmp_path / "short.pt")
    (tmp_path / "text.pt").write_text("not a checkpoint")
    with pytest.raises(torch_checkpoint.CheckpointError, match=r"text\.pt: not a torch"):
        torch_checkpoint.load(tmp_path / "text.pt")


def test_loaded_paddle_model_gives_the_pytorch_models_scores_and_loss(probe, tiny):
    found, out = probe
    model = torch_model(tiny)
    val = torch_entry.BertShards(tiny / common.EVAL_DIR, PROFILE["max_seq_length"],
                                 PROFILE["max_predictions_per_seq"])
    batch = torch_entry.collate([val[i] for i in range(8)])
    with torch.no_grad():
        mlm, nsp = torch_entry.heads(model, batch)
        loss = float(torch_entry.pretraining_loss(model, batch))
    assert np.load(out / "mlm.npy").shape == tuple(mlm.shape) == (8, 20, 4096)
    assert np.abs(np.load(out / "mlm.npy") - mlm.numpy()).max() < 1e-4
    assert np.abs(np.load(out / "nsp.npy") - nsp.numpy()).max() < 1e-4
    assert found["loss"] == pytest.approx(loss, abs=1e-4)  # the masked mean, not paddle's


# --- data ----------------------------------------------------------------------------------

def test_reader_gives_the_pytorch_cases_samples(tiny):
    seq, preds = PROFILE["max_seq_length"], PROFILE["max_predictions_per_seq"]
    ours = common.BertShards(tiny / common.TRAIN_DIR, seq, preds)
    theirs = torch_entry.BertShards(tiny / common.TRAIN_DIR, seq, preds)
    assert len(ours) == len(theirs) == 1024
    with h5py.File(sorted((tiny / common.TRAIN_DIR).glob("part*"))[1], "r") as second:
        assert np.array_equal(ours[512]["input_ids"], second["input_ids"][0])
    for index in (0, 511, 512, 1023):
        for key, value in theirs[index].items():
            assert ours[index][key].dtype == np.int64
            assert np.array_equal(ours[index][key], value.numpy()), (index, key)
    batch = common.collate([ours[i] for i in range(8)])
    reference = torch_entry.collate([theirs[i] for i in range(8)])
    for key, value in reference.items():
        assert np.array_equal(batch[key], value.numpy()), key
    labels = common.masked_labels(batch["masked_lm_ids"], batch["masked_lm_positions"])
    assert np.array_equal(labels, torch_entry.masked_labels(reference).numpy())
    with pytest.raises(ValueError, match=r"part_00000_of_00002\.hdf5: input_ids \[512, 128\]"):
        common.BertShards(tiny / common.TRAIN_DIR, 512, preds)
    with pytest.raises(FileNotFoundError, match="no shard files"):
        common.BertShards(tiny, seq, preds)


def test_ranks_share_an_epoch_and_evaluate_every_sample_once():
    ranks = [shards.train_batches(1030, 16, rank, 2, seed=1234, epoch=3) for rank in (0, 1)]
    assert [len(b) for b in ranks] == [32, 32] and all(len(x) == 16 for b in ranks for x in b)
    seen = [i for batches in ranks for batch in batches for i in batch]
    assert len(seen) == len(set(seen))  # disjoint
    assert shards.train_batches(1030, 16, 0, 2, 1234, 3) == ranks[0]  # same seed, same order
    assert shards.train_batches(1030, 16, 0, 2, 1234, 4) != ranks[0]  # reshuffled per epoch
    evaluated = [i for rank in (0, 1, 2) for b in shards.eval_batches(256, 64, rank, 3) for i in b]
    assert sorted(evaluated) == list(range(256))
    with pytest.raises(ValueError, match="no whole batch of 16"):
        shards.train_batches(20, 16, 0, 2, 0, 1)


def test_batches_are_read_ahead_in_order_and_errors_surface(tiny):
    rows = common.BertShards(tiny / common.EVAL_DIR, 128, 20)
    plan = shards.eval_batches(len(rows), 64, 0, 1)
    read = list(shards.batches(rows, plan))
    direct = list(shards.batches(rows, plan, prefetch=0))
    assert len(read) == 4 and all(np.array_equal(a["input_ids"], b["input_ids"])
                                  for a, b in zip(read, direct))
    with pytest.raises(IndexError, match="sample 9999 of 256"):
        list(shards.batches(rows, [[0], [9999]]))


# --- cpu profile rounds through the paddle launcher -------------------------------------------

def run_round(python: Path, data: Path, tmp_path: Path, nproc: int,
              **changes) -> tuple[Path, str]:
    """Run the cpu profile, with ``changes`` to its configuration, as a round's node would
    (launchers.launch_argv/launch_env for the ``paddle`` launcher); returns the output folder
    and the launcher's output."""
    output = tmp_path / "out"
    output.mkdir()
    (output / "config.yaml").write_text(yaml.safe_dump({**PROFILE, **changes}))
    round_ = {"launcher": "paddle", "entry": None, "case_dir": "benchmarks/bert/paddle",
              "model": "bert", "framework": "paddle", "nnodes": 1, "nproc_per_node": nproc, "master_addr": "127.0.0.1",
              "vendor_dir": "vendors/cpu"}
    argv = launch_argv(round_, 0, str(python), str(ROOT), str(output), str(data), 29500)
    env = {**os.environ, **launch_env(round_, 0, str(ROOT), 29500)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env=env)
    logs = "\n".join(p.read_text() for p in sorted(output.glob("rank*.out.log")))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:] + logs[-3000:]
    return output, done.stdout + done.stderr


def events(output: Path, rank: int = 0) -> list[dict]:
    return parse_rank_log(output / f"rank{rank}.out.log").events


def test_two_processes_under_paddle_launch_sum_their_samples(paddle_python, tiny, tmp_path):
    # 32 updates, not the profile's way to its target (the local run's round goes there).
    output, _ = run_round(paddle_python, tiny, tmp_path, nproc=2, max_steps=32,
                          eval_interval_samples=0)
    assert (output / "paddle_log").is_dir()  # the launcher's own logs (--log_dir)
    finished = [events(output, rank)[-1] for rank in (0, 1)]
    assert all(e["event"] == "FINISHED" for e in finished)
    first, second = (e["value"] for e in finished)
    assert first["world_size"] == second["world_size"] == 2
    assert first["global_steps"] == second["global_steps"]
    # The profile's batch per rank per update, two ranks: the sum over both
    assert first["num_trained_samples"] == \
        2 * PROFILE["train_batch_size"] * first["global_steps"]
    assert first["final_mlm_accuracy"] == second["final_mlm_accuracy"]  # summed over ranks
    assert first["global_steps"] == 32 and first["converged"] is False
    ddp = [e for e in events(output) if e["event"] == "MODEL_TO_DDP"]
    assert ddp and ddp[0]["value"] == {"world_size": 2}
