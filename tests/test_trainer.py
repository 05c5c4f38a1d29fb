"""benchmarks/driver/torch: the trainer's behaviours on a tiny real model (a linear regression)
and real tensors: termination, evaluation, convergence both ways, gradient accumulation, the
fp16 grad scaler, vendor hooks, two ranks over gloo; and the driver's core importing no torch."""

import dataclasses
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from case_model import torch_finished_keys
from driver.convergence import Target
from driver.perflog import PerfLogger
from driver.torch.trainer import Progress, Trainer, TrainerSettings, TrainingCase, loader_workers
from flagperf_ansible.results.perflog import parse_lines

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
WEIGHTS = torch.tensor([[1.5], [-2.0], [0.5], [1.0]])


@pytest.fixture(autouse=True)
def single_rank_without_vendor(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "FLAGPERF_VENDOR_DIR"):
        monkeypatch.delenv(name, raising=False)


def regression(samples: int, seed: int) -> torch.utils.data.TensorDataset:
    """``y = x @ WEIGHTS`` for ``samples`` random ``x`` of 4 features."""
    inputs = torch.randn(samples, 4, generator=torch.Generator().manual_seed(seed))
    return torch.utils.data.TensorDataset(inputs, inputs @ WEIGHTS)


class Regression:
    """A linear model fitted by mean squared error; keeps what the trainer built, to look at."""

    def __init__(self, optimizer=torch.optim.SGD, lr=0.1, loss_scale=1.0,
                 target=Target("mse", 0.05, higher_is_better=False)):
        self.models: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.case = TrainingCase(
            train_set=regression(64, seed=1), val_set=regression(32, seed=2),
            build_model=self.build_model,
            create_optimizer=lambda model, ctx: self.keep(optimizer(model.parameters(), lr=lr)),
            train_loss=lambda model, batch: loss_scale * torch.nn.functional.mse_loss(
                model(batch[0]), batch[1]),
            eval_sum_names=("squared_error", "count"),
            eval_sums=lambda model, batch: {
                "squared_error": float(((model(batch[0]).float() - batch[1]) ** 2).sum()),
                "count": len(batch[1])},
            eval_metric=lambda sums: sums["squared_error"] / sums["count"],
            target=target, model_info={"features": 4})

    def build_model(self) -> torch.nn.Module:
        self.models.append(torch.nn.Linear(4, 1))
        return self.models[-1]

    def keep(self, optimizer):
        self.optimizers.append(optimizer)
        return optimizer


def initial_weights() -> torch.Tensor:
    """The weights the trainer's seed (7) gives the model: seeded, then built first."""
    torch.manual_seed(7)
    return torch.nn.Linear(4, 1).weight.detach()


def train(config: dict, case: TrainingCase, **trainer_args) -> list[dict]:
    """Fit ``case`` with ``config`` in this process; the PerfLog events it wrote, parsed."""
    stream = io.StringIO()
    settings = {"train_batch_size": 8, "eval_batch_size": 16, "log_freq": 1, "seed": 7,
                "stop_at_target": False, **config}
    trainer = Trainer(settings, model="tiny", log=PerfLogger(stream=stream), **trainer_args)
    assert trainer.fit(case) == 0
    events, bad = parse_lines(stream.getvalue().splitlines())
    assert bad == 0
    return events


def values(events: list[dict], name: str) -> list[dict]:
    return [e.get("value") for e in events if e["event"] == name]


def finished(events: list[dict]) -> dict:
    (value,) = values(events, "FINISHED")
    return value


def test_terminates_after_max_steps_mid_epoch_and_evaluates_the_last_model():
    events = train({"max_steps": 5}, Regression().case)
    done = finished(events)
    assert (done["global_steps"], done["num_trained_samples"], done["epochs"]) == (5, 40, 1)
    assert [v["global_steps"] for v in values(events, "STEP_END")] == [1, 2, 3, 4, 5]
    assert [v["global_steps"] for v in values(events, "EVALUATE")] == [5]
    assert done["final_mse"] == values(events, "EVALUATE")[-1]["mse"]
    assert done["p_whole"] == pytest.approx(40 / done["raw_train_time"])
    # The keys the cases on other frameworks are held to (test_bert_paddle, test_resnet50_*).
    assert set(done) == torch_finished_keys("mse")
    # 5 windows: the first 2 (at most half) are left out of the steady median.
    assert done["core_warmup_steps"] == 2 and 0 < done["core_step_ms_p50"]


def test_the_steady_median_leaves_the_first_compute_windows_out():
    from driver import finished as finished_module

    clock = finished_module.RoundClock()
    clock.compute_windows = [1.0] * finished_module.STEADY_SKIP + [0.002, 0.004, 0.003] * 10
    clock.compute_time = sum(clock.compute_windows)
    done = clock.finished(30, False)
    assert done["core_warmup_steps"] == finished_module.STEADY_SKIP
    assert done["core_step_ms_p50"] == pytest.approx(3.0)
    # p_core keeps FlagPerf's meaning: every window counts, the slow first ones too.
    assert done["p_core"] == pytest.approx(30 / clock.compute_time)
    assert "core_step_ms_p50" not in finished_module.RoundClock().finished(0, False)


def test_baselines_score_the_model_as_built_and_the_input_blind_predictor():
    """``evaluate_baselines``: the initial weights' metric at step 0 (an EVALUATE between
    INIT_END and TRAIN_START, not charged to training), and the case's input-blind predictor
    (here: the mean target of the training set) after training; both in FINISHED."""
    case = Regression().case
    mean = float(torch.stack([y for _, y in case.train_set]).mean())
    seen = []

    def input_blind(model):
        seen.append(model.training)
        targets = torch.stack([y for _, y in case.val_set])
        return float(((targets - mean) ** 2).mean())

    case.input_blind = input_blind
    events = train({"max_steps": 24, "evaluate_baselines": True}, case)
    names = [e["event"] for e in events]
    first = values(events, "EVALUATE")[0]
    assert names.index("INIT_END") < names.index("EVALUATE") < names.index("TRAIN_START")
    torch.manual_seed(7)                      # the model as the trainer's seed builds it
    built = torch.nn.Linear(4, 1)
    inputs, targets = case.val_set.tensors
    with torch.no_grad():
        expected = float(((built(inputs) - targets) ** 2).mean())
    assert first == {"epoch": 0, "global_steps": 0, "mse": pytest.approx(expected),
                     "untrained": True}
    done = finished(events)
    assert done["untrained_mse"] == first["mse"] and seen == [False]
    assert done["blind_mse"] == pytest.approx(float(((targets - mean) ** 2).mean()))
    assert done["final_mse"] < min(done["blind_mse"], done["untrained_mse"])
    assert [v["global_steps"] for v in values(events, "EVALUATE")] == [0, 8, 16, 24]


def test_a_further_target_must_be_reached_too_and_gets_its_own_baselines():
    """``TrainingCase.also``: an evaluation giving several figures (here the mean squared and
    the mean absolute error) converges when every target is reached; each figure goes into
    EVALUATE and FINISHED, each target's baselines into FINISHED."""
    case = Regression(target=Target("mse", 10.0, higher_is_better=False)).case

    def eval_sums(model, batch):
        error = model(batch[0]).float() - batch[1]
        return {"squared_error": float((error ** 2).sum()),
                "absolute_error": float(error.abs().sum()), "count": len(batch[1])}

    case.eval_sum_names = ("squared_error", "absolute_error", "count")
    case.eval_sums = eval_sums
    case.eval_metric = lambda sums: {"mse": sums["squared_error"] / sums["count"],
                                     "mae": sums["absolute_error"] / sums["count"]}
    case.also = (Target("mae", 0.3, higher_is_better=False),)
    case.input_blind = lambda model: {"mse": 5.0, "mae": 1.5}
    events = train({"max_steps": 40, "eval_interval_samples": 64, "stop_at_target": True,
                    "evaluate_baselines": True}, case)
    evaluations = values(events, "EVALUATE")
    assert [set(v) for v in evaluations] == [{"epoch", "global_steps", "mse", "mae", "untrained"}] \
        + [{"epoch", "global_steps", "mse", "mae"}] * (len(evaluations) - 1)
    # The first target alone is met long before the run stops: at the first evaluation whose
    # absolute error is at most 0.3, not before.
    assert evaluations[1]["mse"] <= 10.0 and evaluations[1]["mae"] > 0.3
    stop = next(i for i, v in enumerate(evaluations[1:], 1) if v["mae"] <= 0.3)
    assert stop == len(evaluations) - 1
    done = finished(events)
    assert done["converged"] is True
    assert (done["final_mse"], done["final_mae"]) == (evaluations[-1]["mse"],
                                                       evaluations[-1]["mae"])
    assert (done["target_mse"], done["target_mae"]) == (10.0, 0.3)
    assert (done["untrained_mae"], done["blind_mae"], done["blind_mse"]) == (
        evaluations[0]["mae"], 1.5, 5.0)


def test_baselines_need_the_cases_input_blind_predictor():
    with pytest.raises(ValueError, match="evaluate_baselines: the case has no input-blind"):
        train({"max_steps": 1, "evaluate_baselines": True}, Regression().case)


def test_a_case_counting_other_units_gets_its_throughput_in_them_and_samples_beside():
    # Tokens: 3 per sample (say), counted per training batch, held back until the update.
    case = Regression().case
    case.units = ("tokens", lambda batch: 3 * len(batch[0]))
    done = finished(train({"max_samples": 40, "gradient_accumulation_steps": 2}, case))
    assert (done["num_trained_samples"], done["num_trained_tokens"]) == (48, 144)
    assert done["p_train"] == pytest.approx(144 / done["train_no_eval_time"])
    assert done["p_whole"] == pytest.approx(144 / done["raw_train_time"])
    assert done["p_train_samples"] == pytest.approx(48 / done["train_no_eval_time"])


def test_terminates_after_max_samples_at_the_first_update_past_them():
    # Updates of 2 x 8 samples: 32 samples after 2, 48 after 3.
    events = train({"max_samples": 40, "gradient_accumulation_steps": 2}, Regression().case)
    done = finished(events)
    assert (done["global_steps"], done["num_trained_samples"]) == (3, 48)
    assert [v["num_trained_samples"] for v in values(events, "STEP_END")] == [16, 32, 48]


def test_terminates_after_epochs_evaluating_each():
    events = train({"epochs": 3, "log_freq": 4}, Regression().case)
    done = finished(events)
    assert (done["epochs"], done["global_steps"], done["num_trained_samples"]) == (3, 24, 192)
    assert [v["epoch"] for v in values(events, "EPOCH_END")] == [1, 2, 3]
    assert [v["global_steps"] for v in values(events, "EVALUATE")] == [8, 16, 24]
    assert [v["global_steps"] for v in values(events, "STEP_END")] == [4, 8, 12, 16, 20, 24]
    names = [e["event"] for e in events]
    assert names[:3] == ["INIT_START", "CONVERT_MODEL", "CREATE_OPTIMIZER"]
    assert names.index("INIT_END") < names.index("TRAIN_START") < names.index("TRAIN_END")
    assert names[-2:] == ["TRAIN_END", "FINISHED"]
    assert "MODEL_TO_FP16" not in names and "MODEL_TO_DDP" not in names


def test_evaluates_every_n_samples_and_once_more_at_the_end():
    every_16 = train({"epochs": 1, "eval_interval_samples": 16}, Regression().case)
    assert [v["global_steps"] for v in values(every_16, "EVALUATE")] == [2, 4, 6, 8]
    every_24 = train({"epochs": 1, "eval_interval_samples": 24}, Regression().case)
    assert [v["global_steps"] for v in values(every_24, "EVALUATE")] == [3, 6, 8]


def test_stops_at_a_lower_is_better_target_once_reached():
    events = train({"epochs": 50, "stop_at_target": True}, Regression().case)
    done = finished(events)
    mse = [v["mse"] for v in values(events, "EVALUATE")]
    assert done["converged"] is True and done["epochs"] == len(mse) < 50
    assert mse[-1] <= 0.05 < min(mse[:-1])  # it stopped at the first evaluation that reached it
    assert (done["final_mse"], done["target_mse"]) == (mse[-1], 0.05)


def test_an_unreached_target_runs_every_epoch_and_does_not_converge():
    case = Regression(target=Target("mse", 1e-12, higher_is_better=False)).case
    done = finished(train({"epochs": 3, "stop_at_target": True}, case))
    assert done["converged"] is False and done["epochs"] == 3


def test_gradient_accumulation_counts_updates_and_matches_the_larger_batch():
    adam = Regression(optimizer=torch.optim.Adam, lr=0.01)
    done = finished(train({"epochs": 1, "train_batch_size": 4,
                           "gradient_accumulation_steps": 2}, adam.case))
    # 64 samples: 16 micro-batches of 4, 8 updates.
    assert done["global_steps"] == 8 and done["num_trained_samples"] == 64
    (optimizer,) = adam.optimizers
    assert {int(optimizer.state[p]["step"]) for p in adam.models[0].parameters()} == {8}

    # 2 micro-batches of 4 (the loss halved) give the gradient of one batch of 8: same seed,
    # same initial weights and sample order, so plain SGD ends with the same weights.
    accumulated, whole = Regression(), Regression()
    train({"epochs": 2, "train_batch_size": 4, "gradient_accumulation_steps": 2},
          accumulated.case)
    train({"epochs": 2, "train_batch_size": 8}, whole.case)
    for a, b in zip(accumulated.models[0].parameters(), whole.models[0].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.equal(whole.models[0].weight.cpu(), initial_weights())


def test_micro_batch_steps_count_max_steps_and_the_eval_cadence_in_micro_batches():
    """``step_unit: micro_batch`` (FlagPerf's bert): 8 micro-batches of 4 with 2 per update are
    4 updates; ``eval_interval_steps`` 4 evaluates after micro-batches 4 and 8 (updates 2, 4)."""
    events = train({"max_steps": 8, "train_batch_size": 4, "gradient_accumulation_steps": 2,
                    "step_unit": "micro_batch", "eval_interval_steps": 4}, Regression().case)
    done = finished(events)
    assert (done["global_steps"], done["num_trained_samples"]) == (4, 32)
    assert [v["global_steps"] for v in values(events, "EVALUATE")] == [2, 4]
    # In updates (the default), the same keys mean 8 updates and an evaluation every 4.
    events = train({"max_steps": 8, "train_batch_size": 4, "gradient_accumulation_steps": 2,
                    "eval_interval_steps": 4}, Regression().case)
    assert finished(events)["global_steps"] == 8
    assert [v["global_steps"] for v in values(events, "EVALUATE")] == [4, 8]


def test_the_sample_cap_counts_every_rank_or_one_process():
    """``max_samples_scope: process`` (FlagPerf's bert counts train_batch_size x steps of one
    process): on 2 ranks 40 samples are reached after 40 of the process's, not 20."""
    from driver.finished import RoundClock
    from driver.training_loop import CaseStart, LoopSettings, TrainingLoop

    base = {"train_batch_size": 8, "eval_batch_size": 8, "max_samples": 40}
    start = CaseStart(args=None, config={}, rank=0, world_size=2,
                      log=PerfLogger(stream=io.StringIO()), clock=RoundClock())
    world, process = (TrainingLoop(LoopSettings.from_config(config), Target("acc", 1.0), start,
                                   all_reduce_sum=lambda values: values)
                      for config in (base, {**base, "max_samples_scope": "process"}))
    assert world.limit_reached(Progress(samples=24))
    assert not process.limit_reached(Progress(samples=24))
    assert process.limit_reached(Progress(samples=40))
    plans = []
    for config in (base, {**base, "max_samples_scope": "process"}):
        trainer = Trainer(config, model="tiny", log=PerfLogger(stream=io.StringIO()))
        trainer.info = dataclasses.replace(trainer.info, world_size=2)
        plans.append(trainer._plan(100).total_steps)
    assert plans == [3, 5]


def test_undivided_accumulation_sums_the_micro_batch_gradients():
    """``divide_loss_by_accumulation: false`` (FlagPerf's vit and bert): 2 micro-batches of 4
    give twice the gradient of one batch of 8, so plain SGD at half the learning rate ends
    where the whole batch does."""
    summed, whole = Regression(lr=0.05), Regression(lr=0.1)
    train({"epochs": 2, "train_batch_size": 4, "gradient_accumulation_steps": 2,
           "divide_loss_by_accumulation": False}, summed.case)
    train({"epochs": 2, "train_batch_size": 8}, whole.case)
    for a, b in zip(summed.models[0].parameters(), whole.models[0].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_batch_sampler_makes_the_training_batches():
    """``TrainingCase.batch_sampler`` (detection's aspect-ratio groups) receives the sampler
    and the batch size, and its batches are what the model trains on."""
    seen = []

    def batch_sampler(sampler, batch_size):
        seen.append(batch_size)
        return torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(16)),
                                             batch_size, drop_last=True)

    case = Regression().case
    case.batch_sampler = batch_sampler
    done = finished(train({"epochs": 1}, case))
    assert seen == [8] and (done["global_steps"], done["num_trained_samples"]) == (2, 16)


def test_fp16_trains_through_the_grad_scaler_which_skips_overflowing_steps():
    fp16 = Regression()
    events = train({"epochs": 20, "precision": "fp16", "stop_at_target": True}, fp16.case)
    assert values(events, "MODEL_TO_FP16") == [{"precision": "fp16", "hook": "default"}]
    assert finished(events)["converged"] is True

    # A loss this large overflows fp16 gradients at the scaler's initial scale (2^16): the
    # scaler skips the update, so the weights stay the initial ones; in fp32 they move.
    for precision, moved in (("fp16", False), ("fp32", True)):
        run = Regression(loss_scale=1e5)
        train({"max_steps": 1, "precision": precision}, run.case)
        assert torch.equal(run.models[0].weight.cpu(), initial_weights()) is not moved, precision


def test_a_vendor_hook_is_taken_from_the_vendor_dir_and_the_others_default(tmp_path,
                                                                           monkeypatch):
    extern = tmp_path / "vendors/acme/tiny-pytorch/extern"
    extern.mkdir(parents=True)
    (extern / "scale.py").write_text("LR = 0.25\n")
    (extern / "adapter.py").write_text(textwrap.dedent("""\
        import torch
        from scale import LR  # a module beside the adapter

        SYNCHRONIZED = []

        def device(local_rank):
            return torch.device("cpu")

        def synchronize(device):
            SYNCHRONIZED.append(device.type)

        def convert_model(model, ctx):
            model.converted_for = (ctx.device.type, ctx.precision, ctx.dist.world_size)
            return model

        def create_optimizer(model, ctx):
            return torch.optim.SGD(model.parameters(), lr=LR)
        """))
    (tmp_path / "vendors/acme/other-pytorch/extern").mkdir(parents=True)
    (tmp_path / "vendors/acme/other-pytorch/extern/adapter.py").write_text("raise ImportError\n")
    monkeypatch.setenv("FLAGPERF_VENDOR_DIR", str(tmp_path / "vendors/acme"))
    monkeypatch.syspath_prepend(str(extern))  # the launch's PYTHONPATH has it (case_path)
    run = Regression()
    events = train({"max_steps": 2}, run.case)
    assert values(events, "CONVERT_MODEL") == [{"model": "tiny", "features": 4, "hook": "vendor"}]
    assert values(events, "CREATE_OPTIMIZER") == [
        {"optimizer": "SGD", "learning_rate": 0.25, "hook": "vendor"}]
    assert run.models[0].converted_for == ("cpu", "fp32", 1)
    assert run.optimizers == []  # the case's own optimizer was not made
    # The round clock waits on the vendor's device around each timed phase.
    synchronized = sys.modules["flagperf_vendor_adapter_tiny"].SYNCHRONIZED
    assert synchronized and set(synchronized) == {"cpu"}

    monkeypatch.setenv("FLAGPERF_VENDOR_DIR", str(tmp_path / "vendors/missing"))
    with pytest.raises(FileNotFoundError, match="no such vendor folder"):
        train({"max_steps": 1}, Regression().case)


def test_settings_refuse_a_run_without_an_end_or_with_an_unknown_precision():
    with pytest.raises(ValueError, match="at least one of epochs, max_steps, max_samples"):
        TrainerSettings.from_config({"train_batch_size": 8, "eval_batch_size": 8, "epochs": 0})
    with pytest.raises(ValueError, match="config precision: 'fp8'"):
        TrainerSettings.from_config({"train_batch_size": 8, "eval_batch_size": 8, "epochs": 1,
                                     "precision": "fp8"})
    with pytest.raises(ValueError, match="config step_unit: 'epoch'"):
        TrainerSettings.from_config({"train_batch_size": 8, "eval_batch_size": 8, "epochs": 1,
                                     "step_unit": "epoch"})
    with pytest.raises(ValueError, match="set one of eval_interval_samples, eval_interval_steps"):
        TrainerSettings.from_config({"train_batch_size": 8, "eval_batch_size": 8, "epochs": 1,
                                     "eval_interval_samples": 16, "eval_interval_steps": 2})


def test_convergence_target_in_both_directions():
    accuracy, loss = Target("acc1", 75.0), Target("loss", 0.5, higher_is_better=False)
    assert accuracy.reached(75.0) and not accuracy.reached(74.9) and not accuracy.reached(None)
    assert loss.reached(0.5) and loss.reached(0.1) and not loss.reached(0.6)
    assert not loss.reached(float("nan"))
    assert accuracy.finished_figures(76.5) == {"final_acc1": 76.5, "target_acc1": 75.0}
    with pytest.raises(ValueError):
        Target("acc1", float("inf"))


def test_the_driver_core_imports_no_framework():
    script = ("import sys\n"
              f"sys.path.insert(0, {str(BENCHMARKS)!r})\n"
              "import driver, driver.perflog, driver.finished, driver.case_io, "
              "driver.convergence, driver.dist\n"
              "print(sorted(m for m in ('torch', 'numpy', 'tensorflow', 'paddle') "
              "if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


TWO_RANKS = """\
import io, json, sys
sys.path[:0] = [{benchmarks!r}, {tests!r}, {src!r}]
import torch
from driver.dist import dist_info, exit_rank
from driver.perflog import PerfLogger
from driver.torch.trainer import Trainer
from test_trainer import Regression

rank = dist_info().rank
stream = open(f"rank{{rank}}.out.log", "w")
run = Regression()
trainer = Trainer({{"train_batch_size": 4, "eval_batch_size": 8, "epochs": 2, "seed": 7,
                   "gradient_accumulation_steps": 2, "log_freq": 1, "dist_backend": "gloo"}},
                  model="tiny", log=PerfLogger(rank=rank, stream=stream))
status = trainer.fit(run.case)
weights = run.models[0].weight.detach().flatten().tolist()
open(f"rank{{rank}}.json", "w").write(json.dumps(weights))
stream.close()
exit_rank(status)
"""


def test_two_ranks_train_the_same_weights_over_gloo_and_count_every_sample(tmp_path):
    script = tmp_path / "two_ranks.py"
    script.write_text(TWO_RANKS.format(benchmarks=str(BENCHMARKS),
                                       tests=str(Path(__file__).parent),
                                       src=str(BENCHMARKS.parent / "src")))
    # Both ranks on the CPU, even where a GPU is (gloo; one machine may have a single GPU).
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    logs = {}
    for rank in (0, 1):
        events, bad = parse_lines((tmp_path / f"rank{rank}.out.log").read_text().splitlines())
        assert bad == 0
        logs[rank] = events
    for events in logs.values():
        # 64 samples: 32 a rank, 8 micro-batches of 4, 4 updates of 2 x 4 x 2 ranks an epoch.
        assert values(events, "MODEL_TO_DDP") == [{"world_size": 2, "hook": "default"}]
        done_ = finished(events)
        assert (done_["global_steps"], done_["num_trained_samples"]) == (8, 128)
        assert done_["world_size"] == 2
    assert values(logs[0], "EVALUATE") == values(logs[1], "EVALUATE")
    weights = [(tmp_path / f"rank{rank}.json").read_text() for rank in (0, 1)]
    assert weights[0] == weights[1]


def test_the_framework_free_loop_scores_the_same_baselines():
    """``driver.training_loop``, which the TensorFlow, MindSpore and Paddle cases train with:
    with ``evaluate_baselines``, the metric before the first update at step 0 and the case's
    input-blind score in FINISHED; without the case's predictor, FINISHED is refused."""
    from driver.finished import RoundClock
    from driver.training_loop import CaseStart, LoopSettings, TrainingLoop

    def fit(input_blind=None) -> list[dict]:
        stream = io.StringIO()
        start = CaseStart(args=None, config={}, rank=0, world_size=1,
                          log=PerfLogger(stream=stream), clock=RoundClock())
        settings = LoopSettings.from_config({"train_batch_size": 2, "eval_batch_size": 2,
                                             "max_steps": 3, "evaluate_baselines": True})
        loop = TrainingLoop(settings, Target("acc", 0.9), start)
        weights = [0.0]                       # "training" raises the score by 0.25 an update

        def step(_batch):
            weights[0] += 0.25
            return 1.0

        loop.init_done()
        progress = loop.run(epoch_batches=lambda epoch: [1, 2, 3, 4], train_step=step,
                            batch_samples=lambda batch: 2, evaluate=lambda: 0.1 + weights[0])
        loop.finish(progress, input_blind=input_blind)
        events, bad = parse_lines(stream.getvalue().splitlines())
        assert bad == 0
        return events

    events = fit(lambda: 0.25)
    assert values(events, "EVALUATE") == [
        {"epoch": 0, "global_steps": 0, "acc": 0.1, "untrained": True},
        {"epoch": 1, "global_steps": 3, "acc": 0.85}]
    done = finished(events)
    assert (done["untrained_acc"], done["blind_acc"], done["final_acc"]) == (0.1, 0.25, 0.85)
    with pytest.raises(ValueError, match="no input-blind predictor"):
        fit()


def test_loader_workers_are_bounded_by_the_hosts_cores_over_its_ranks():
    assert loader_workers(0, 1, cores=16) == 0          # none configured: none started
    assert loader_workers(32, 1, cores=16) == 16        # FlagPerf's 32 on a 16-core host
    assert loader_workers(32, 8, cores=16) == 2         # shared among the host's 8 ranks
    assert loader_workers(32, 8, cores=4) == 1          # at least one each
    assert loader_workers(4, 1, cores=16) == 4          # fewer than the cores: as configured
    assert 1 <= loader_workers(32, 1) <= (os.cpu_count() or 1)


def test_loader_workers_persist_and_the_first_batch_is_read_before_train_start():
    """With workers, the first epoch's batches are those read without them (its loader
    starts before TRAIN_START, its first batch read there); later epochs reuse the persistent
    workers, and a run with them is as repeatable as one without."""
    def weights_after(workers: int, epochs: int) -> torch.Tensor:
        case = Regression()
        done = finished(train({"epochs": epochs, "num_workers": workers}, case.case))
        assert (done["global_steps"], done["epochs"]) == (8 * epochs, epochs)  # batches of 8
        return case.models[-1].weight.detach()

    torch.testing.assert_close(weights_after(2, 1), weights_after(0, 1))
    torch.testing.assert_close(weights_after(2, 2), weights_after(2, 2))
