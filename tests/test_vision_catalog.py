"""The vision training cases (benchmarks/<model>/pytorch) against published figures, and the
shared classification code (benchmarks/driver/torch/classification.py) on its own.

* Each case's standard model has the published parameter count (torchvision's weights meta
  ``num_params``; timm's ``resnetv2_152x2_bit``), built on the meta device (no memory).
* Each case's declared training FLOPs per image (``case.yml`` ``mfu.flops_per_unit``) is 3 x
  the forward FLOPs ``torch.utils.flop_counter`` counts on that model at the standard crop.
* The learning-rate schedules, the repeated-augmentation sampler, mixup/cutmix batches, the
  optimizer's parameter groups, and gradient clipping in the trainer's default backward hook.
"""

from __future__ import annotations

import io
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from case_model import case_model
from driver.convergence import Target
from driver.perflog import PerfLogger
from driver.torch import classification
from driver.torch.optimizers import make_optimizer
from driver.torch.trainer import Trainer, TrainingCase, TrainingPlan
from flagperf_ansible.config.cases import load_case, profile_of
from flagperf_ansible.results.mfu import flops_per_unit
from unavailable import need_module

ROOT = Path(__file__).resolve().parents[1]

#: Parameters of each case's standard model with 1000 classes: torchvision's weights meta
#: ``num_params`` (ResNet50_Weights, MobileNet_V2_Weights, EfficientNet_V2_S_Weights,
#: ViT_B_16_Weights, Swin_T_Weights) and timm's resnetv2_152x2_bit (236.34 M on its model card).
PUBLISHED_PARAMS = {
    "resnet50": 25_557_032,
    "mobilenetv2": 3_504_872,
    "efficientnet": 21_458_488,
    "vit": 86_567_656,
    "swin_transformer": 28_288_354,
    "bigtransfer": 236_335_208,
}
CASES = list(PUBLISHED_PARAMS)


def standard_params(model: str) -> dict:
    """The case's standard configuration, without an initial checkpoint (none is read here)."""
    params = dict(load_case(ROOT, model, "pytorch").standard.params)
    params.pop("init_checkpoint", None)
    return params


def meta_model(model: str, config: dict, num_classes: int = 1000) -> torch.nn.Module:
    with torch.device("meta"):
        return case_model(model).build_model(config, num_classes).eval()


def forward_flops(net: torch.nn.Module, crop: int) -> int:
    """FLOPs torch's counter gives one forward pass of one ``crop`` x ``crop`` image (2 per
    multiply-add), on the model's own device."""
    device = next(net.parameters()).device
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        net(torch.zeros(1, 3, crop, crop, device=device))
    return counter.get_total_flops()


# -- the catalog against published figures ----------------------------------------------------

def count_parameters(model: torch.nn.Module) -> int:
    """Weights and biases (buffers such as BN statistics excluded), as published counts are."""
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model", CASES)
def test_standard_model_has_the_published_parameter_count(model):
    net = meta_model(model, standard_params(model))
    assert count_parameters(net) == PUBLISHED_PARAMS[model]


def test_bigtransfer_model_is_timms_resnetv2_152x2_bit():
    timm = need_module("timm", "pip install -e '.[local]'")
    with torch.device("meta"):
        reference = timm.create_model("resnetv2_152x2_bit", pretrained=False)
    model = meta_model("bigtransfer", standard_params("bigtransfer"))
    count = count_parameters(model)
    assert count == count_parameters(reference)
    assert round(count / 1e6, 2) == 236.34
    assert [p.shape for p in model.parameters()] == [p.shape for p in reference.parameters()]


@pytest.mark.parametrize("model", CASES)
def test_declared_training_flops_are_three_forward_passes_of_the_standard_model(model):
    """Training FLOPs per image = 3 x forward (backward = 2 x forward: Kaplan et al. 2020,
    section 2.1), against torch's counter at the standard crop, within 1 %."""
    params = standard_params(model)
    forward = forward_flops(meta_model(model, params), int(params["train_crop_size"]))
    declared = load_case(ROOT, model, "pytorch").spec.mfu.flops_per_unit.model_dump()
    assert flops_per_unit(declared, params) == pytest.approx(3 * forward, rel=0.01)


def test_vit_flops_formula_holds_for_the_cpu_profile_too():
    """The formula follows the configuration: the cpu profile's narrow ViT (4 layers of width
    128, 4x4 patches of 32x32 images, 10 classes) within 2 % of the counter."""
    case = load_case(ROOT, "vit", "pytorch")
    _, profile = profile_of(ROOT, case, "cpu")
    params = {**standard_params("vit"), **profile}
    model = meta_model("vit", params, num_classes=10)
    forward = forward_flops(model, int(params["train_crop_size"]))
    declared = case.spec.mfu.flops_per_unit.model_dump()
    assert flops_per_unit(declared, params) == pytest.approx(3 * forward, rel=0.02)
    standard = flops_per_unit(declared, standard_params("vit"))
    assert flops_per_unit(declared, params) < standard / 100


# -- learning-rate schedules ------------------------------------------------------------------

def test_step_schedule_decays_once_per_epoch():
    """mobilenetv2: x0.98 every epoch (StepLR step 1, gamma 0.98), per update."""
    config = standard_params("mobilenetv2")
    plan = TrainingPlan(steps_per_epoch=100, total_steps=30000, global_batch_size=256)
    factors = {step: classification.lr_factor(step, plan, config)
               for step in (0, 99, 100, 250, 29999)}
    assert factors[0] == factors[99] == 1.0
    assert factors[100] == pytest.approx(0.98)
    assert factors[250] == pytest.approx(0.98 ** 2)
    assert factors[29999] == pytest.approx(0.98 ** 299)


def test_bit_multistep_schedule_with_warmup_steps_restarts_every_epoch():
    """bigtransfer: 500 linear warmup steps from lr_warmup_decay (0), x0.1 at 3000, 6000, 9000
    and 10000 steps, counted afresh each epoch (10009 updates an epoch at a global batch of 128)."""
    config = standard_params("bigtransfer")
    per_epoch = 10009
    plan = TrainingPlan(steps_per_epoch=per_epoch, total_steps=40000, global_batch_size=128)

    def factor(step):
        return classification.lr_factor(step, plan, config)

    assert factor(0) == config["lr_warmup_decay"] == 0.0
    assert factor(250) == pytest.approx(0.5)
    assert factor(500) == factor(2999) == 1.0
    assert factor(3000) == pytest.approx(0.1)
    assert factor(6000) == pytest.approx(0.01)
    assert factor(9000) == pytest.approx(1e-3)
    assert factor(10000) == factor(per_epoch - 1) == pytest.approx(1e-4)
    for epoch in (1, 3):
        start = epoch * per_epoch
        assert factor(start) == 0.0
        assert factor(start + 250) == pytest.approx(0.5)
        assert factor(start + 3000) == pytest.approx(0.1)


def swin_config(**changes) -> dict:
    return {**standard_params("swin_transformer"), **changes}


def test_cosine_schedule_warms_up_then_ends_at_lr_min():
    """swin_transformer without batch scaling: 20 epochs linear from 1e-3 x lr, then cosine
    down to lr_min / learning_rate (5e-6 / 5e-4) at the planned end."""
    config = swin_config(lr_scale_batch=0)
    plan = TrainingPlan(steps_per_epoch=10, total_steps=3000, global_batch_size=2048)

    def factor(step):
        return classification.lr_factor(step, plan, config)

    floor = config["lr_min"] / config["learning_rate"]
    assert factor(0) == pytest.approx(config["lr_warmup_decay"])
    assert factor(100) == pytest.approx(0.001 + 0.999 * 0.5)
    assert factor(200) == pytest.approx(1.0)
    assert factor(1600) == pytest.approx(floor + (1 - floor) * 0.5)     # halfway down
    assert factor(3000) == pytest.approx(floor) == pytest.approx(0.01)
    assert factor(5000) == pytest.approx(floor)                          # past the end: stays
    steps = [factor(s) for s in range(200, 3001, 50)]
    assert steps == sorted(steps, reverse=True)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_vit_schedule_moves_once_per_epoch_as_flagperfs_epoch_stepped_scheduler():
    """vit's lr_schedule_step: epoch holds each epoch at the rate torch's SequentialLR of
    LinearLR (30 epochs from 0.033 x lr) and CosineAnnealingLR (T_max 270) gives when stepped
    once per epoch, as FlagPerf's vit trainer steps it."""
    config = standard_params("vit")
    assert config["lr_schedule_step"] == "epoch"
    plan = TrainingPlan(steps_per_epoch=10, total_steps=3000, global_batch_size=4096)
    optimizer = torch.optim.AdamW(torch.nn.Linear(2, 1).parameters(), lr=1.0)
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.033, total_iters=30)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=270, eta_min=0.0)
    upstream = torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, cosine],
                                                     milestones=[30])
    for epoch in range(300):
        expected = optimizer.param_groups[0]["lr"]
        for step in range(epoch * 10, epoch * 10 + 10):
            assert classification.lr_factor(step, plan, config) == pytest.approx(
                expected, abs=1e-9), (epoch, step)
        upstream.step()


def test_lr_scale_batch_scales_linearly_with_the_global_batch():
    """Swin's base_lr x global batch / 512: the whole schedule, lr_min and warmup included."""
    config = swin_config()
    assert config["lr_scale_batch"] == 512

    def plan(batch):
        return TrainingPlan(steps_per_epoch=10, total_steps=3000, global_batch_size=batch)

    for step in (0, 100, 200, 1600, 3000):
        base = classification.lr_factor(step, plan(512), config)
        assert classification.lr_factor(step, plan(2048), config) == pytest.approx(4 * base)
        assert classification.lr_factor(step, plan(128), config) == pytest.approx(base / 4)
    assert classification.lr_factor(3000, plan(2048), config) * config["learning_rate"] \
        == pytest.approx(4 * config["lr_min"])


@pytest.mark.parametrize("changes, key", [
    ({"lr_scheduler": "exponential"}, "lr_scheduler"),
    ({"lr_warmup_epochs": 1, "lr_warmup_method": "cubic"}, "lr_warmup_method"),
    ({"lr_schedule_step": "batch"}, "lr_schedule_step"),
])
def test_an_unknown_schedule_is_refused(changes, key):
    config = {"learning_rate": 0.1, **changes}
    plan = TrainingPlan(steps_per_epoch=10, total_steps=100, global_batch_size=32)
    with pytest.raises(ValueError, match=key):
        classification.lr_factor(0, plan, config)
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    with pytest.raises(ValueError, match=key):   # before training starts, not mid-run
        classification.make_scheduler(optimizer, plan, config)


# -- repeated augmentation ---------------------------------------------------------------------

def sampled(size, world, reps, epoch, seed=3):
    ranks = []
    for rank in range(world):
        sampler = classification.RepeatedAugmentationSampler(size, world, rank, reps, seed)
        sampler.set_epoch(epoch)
        ranks.append(list(sampler))
        assert len(ranks[-1]) == len(sampler)
    return ranks


def test_repeated_augmentation_spreads_each_image_reps_times_over_the_ranks():
    size, world, reps = 1000, 2, 3
    first, second = sampled(size, world, reps, epoch=0)
    # floor(len // 256 * 256 / world_size) per rank: as long an epoch as without repetition
    assert len(first) == len(second) == 1000 // 256 * 256 // world == 384
    counts = Counter(first + second)
    assert all(0 <= i < size for i in counts)
    assert set(counts.values()) == {reps}              # each chosen image, reps times in all
    assert len(counts) == 2 * 384 // reps
    assert set(first) == set(second)                   # its copies on both ranks


def test_repeated_augmentation_below_256_images_keeps_them_all():
    first, second = sampled(100, 2, 3, epoch=0)
    assert len(first) == len(second) == 50
    assert max(Counter(first + second).values()) <= 3


def test_repeated_augmentation_is_deterministic_per_epoch_and_differs_between_epochs():
    assert sampled(1000, 2, 3, epoch=1) == sampled(1000, 2, 3, epoch=1)
    assert sampled(1000, 2, 3, epoch=1) != sampled(1000, 2, 3, epoch=2)
    assert sampled(1000, 2, 3, epoch=1, seed=3) != sampled(1000, 2, 3, epoch=1, seed=4)


# -- batches and optimizer ---------------------------------------------------------------------

def test_mixup_collate_gives_class_probabilities():
    collate = classification.mixup_collate({"mixup_alpha": 0.2, "cutmix_alpha": 1.0}, 10)
    torch.manual_seed(0)
    items = [(torch.rand(3, 8, 8), label) for label in (0, 3, 3, 9)]
    for _ in range(8):  # MixUp or CutMix, chosen at random per batch
        images, labels = collate(items)
        assert images.shape == (4, 3, 8, 8)
        assert labels.shape == (4, 10) and labels.dtype.is_floating_point
        assert torch.allclose(labels.sum(1), torch.ones(4))
        assert bool((labels >= 0).all())


def test_mixup_collate_is_none_without_mixup_or_cutmix():
    assert classification.mixup_collate({"mixup_alpha": 0.0, "cutmix_alpha": 0.0}, 10) is None
    assert classification.mixup_collate({}, 10) is None
    assert classification.mixup_collate({"cutmix_alpha": 1.0}, 10) is not None


def small_convnet() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                               torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))


def test_make_optimizer_puts_one_dimensional_parameters_in_the_norm_group():
    model = small_convnet()
    config = {"optimizer": "sgd", "learning_rate": 0.1, "momentum": 0.9, "weight_decay": 1e-4,
              "norm_weight_decay": 0.0}
    optimizer = make_optimizer(model, config)
    assert isinstance(optimizer, torch.optim.SGD)
    weights, norms = optimizer.param_groups
    assert {id(p) for p in weights["params"]} == {id(model[0].weight), id(model[3].weight)}
    assert {id(p) for p in norms["params"]} == {id(model[0].bias), id(model[1].weight),
                                                id(model[1].bias), id(model[3].bias)}
    assert weights["weight_decay"] == 1e-4 and norms["weight_decay"] == 0.0
    assert weights["momentum"] == 0.9


def test_make_optimizer_without_norm_weight_decay_decays_every_parameter_alike():
    config = {"optimizer": "adamw", "learning_rate": 1e-3, "weight_decay": 0.05,
              "norm_weight_decay": None, "adam_betas": [0.9, 0.95]}
    optimizer = make_optimizer(small_convnet(), config)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.05, 0.05]
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.95)
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer(small_convnet(), {**config, "optimizer": "lamb"})


# -- gradient clipping in the trainer ----------------------------------------------------------

class NormRecordingSGD(torch.optim.SGD):
    """SGD that records the gradients' total L2 norm each time it steps."""

    def __init__(self, params, lr):
        super().__init__(params, lr=lr)
        self.norms: list[float] = []

    def step(self, closure=None):
        grads = [p.grad for group in self.param_groups for p in group["params"]
                 if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(g) for g in grads]))))
        return super().step(closure)


def step_norms(monkeypatch, config: dict) -> list[float]:
    """Train a linear regression whose targets are far off (gradient norms in the hundreds)
    for a few updates; the gradient norms its optimizer stepped with."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "FLAGPERF_VENDOR_DIR"):
        monkeypatch.delenv(name, raising=False)
    inputs = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    data = torch.utils.data.TensorDataset(inputs, 100.0 * inputs.sum(1, keepdim=True))
    optimizers = []

    def create_optimizer(model, ctx):
        optimizers.append(NormRecordingSGD(model.parameters(), lr=1e-4))
        return optimizers[-1]

    case = TrainingCase(
        train_set=data, val_set=data, build_model=lambda: torch.nn.Linear(4, 1),
        create_optimizer=create_optimizer,
        train_loss=lambda model, batch: torch.nn.functional.mse_loss(model(batch[0]).float(),
                                                                     batch[1]),
        eval_sum_names=("count",), eval_sums=lambda model, batch: {"count": len(batch[0])},
        eval_metric=lambda sums: sums["count"],
        target=Target("count", 0.0, higher_is_better=False))
    settings = {"train_batch_size": 8, "eval_batch_size": 64, "max_steps": 30, "seed": 7,
                "stop_at_target": False, **config}
    trainer = Trainer(settings, model="tiny", log=PerfLogger(stream=io.StringIO()))
    assert trainer.fit(case) == 0
    assert optimizers[0].norms, "no optimizer step was taken"
    return optimizers[0].norms


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_clip_grad_norm_clips_the_gradients_the_optimizer_steps_with(monkeypatch, precision):
    """With ``clip_grad_norm`` the default backward hook clips the total gradient norm to it
    before the step; in fp16 the true (unscaled) gradients, so the norm is the clip itself,
    not the clip divided by the loss scale."""
    unclipped = step_norms(monkeypatch, {"precision": precision})
    assert min(unclipped) > 10.0                       # the setup needs clipping
    clipped = step_norms(monkeypatch, {"precision": precision, "clip_grad_norm": 1.0})
    assert clipped == pytest.approx([1.0] * len(clipped), rel=1e-3)
    assert all(math.isfinite(n) for n in clipped)
