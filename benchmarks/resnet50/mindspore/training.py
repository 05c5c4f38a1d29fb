"""ResNet-50 trained from scratch to a top-1 target on MindSpore (FlagPerf resnet50).

The PyTorch case's recipe (``benchmarks/resnet50/pytorch``) on MindSpore: mindcv's resnet50
(``model.py``), ImageNet class folders through ``mindspore.dataset`` (``imagenet_folders.py``),
SGD with momentum on the per-update schedule of ``schedule.py``, one update per batch through
``mindspore.value_and_grad``; the loop, its PerfLog events and FINISHED are the framework-free
``driver.training_loop``'s, so the figures are those of the PyTorch case.

Ranks are msrun's (``RANK_ID``, ``MS_WORKER_NUM``; ``driver.training_loop.launched_rank``).
With more than one, each process joins MindSpore's collective group (``init``: NCCL on GPU,
MCCL on CPU, HCCL on Ascend), averages the gradients over the ranks
(``nn.DistributedGradReducer``: data parallel, BatchNorm statistics per rank as with torch's
DDP), trains on its shard of every epoch's permutation and evaluates every ``world_size``-th
validation image, the counts summed over the ranks.

Configuration keys besides the loop's (``driver.training_loop``), the data's
(``imagenet_folders``) and the schedule's (``schedule``): ``device_target`` (CPU, GPU,
Ascend), ``mode`` (``graph``: the update compiled with ``mindspore.jit``; ``pynative``: op by
op), ``precision`` (``fp32``; ``fp16``: mindcv's recipe, ``auto_mixed_precision`` O2 with a
static ``loss_scale``), ``optimizer`` (``sgd``), ``momentum``, ``nesterov``,
``weight_decay``, ``norm_weight_decay`` (of 1-D parameters: BatchNorm and biases; null: the
same as ``weight_decay``), ``label_smoothing``, ``zero_init_residual``, ``target_acc1`` (%).
"""

import atexit
import os


import mindspore as ms
import numpy as np
from mindspore import amp, nn, ops

from driver import perflog
from driver.case_io import setting
from driver.convergence import Target, majority_share
from driver.dist import exit_rank
from driver.training_loop import LoopSettings, TrainingLoop, start_case

from . import imagenet_folders, schedule
from .model import trainable_parameters

DEVICE_TARGETS = ("CPU", "GPU", "Ascend")
MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}
PRECISIONS = ("fp32", "fp16")
#: Integer counts cross the ranks as float32 digits of this many bits: MindSpore 2.10's CPU
#: AllReduce takes float32 and float16 only, and a float32 sum of values below 2**12 stays
#: exact over up to 2**12 ranks.
_DIGIT_BITS, _DIGITS = 12, 4


def configure_device(config) -> str:
    """Set MindSpore's device and execution mode from the configuration; returns the device.

    On CPU, oneDNN's ISA is capped at AVX2 unless ``ONEDNN_MAX_CPU_ISA`` is set already: on
    AVX-512 hosts the oneDNN inside MindSpore 2.10 runs its plain-layout (NCHW) 3x3 and 7x7
    convolutions forward with a reference kernel (``ONEDNN_VERBOSE``: ``jit_uni_ncsp:conv+ref``),
    which made this case's update 7x slower (5.3 s against 0.73 s for a batch of 32 at 32x32
    on 2 cores); capped, it takes its jit GEMM kernels. oneDNN reads the variable when it first
    runs a kernel, so setting it here, before any, is enough.

    Raises:
        ValueError: an unknown ``device_target``, ``mode`` or ``precision``.
    """
    device = str(setting(config, "device_target", "CPU"))
    if device not in DEVICE_TARGETS:
        raise ValueError(f"config device_target: {device!r}, expected one of "
                         f"{', '.join(DEVICE_TARGETS)}")
    mode = str(setting(config, "mode", "graph"))
    if mode not in MODES:
        raise ValueError(f"config mode: {mode!r}, expected graph or pynative")
    precision = str(setting(config, "precision", "fp32"))
    if precision not in PRECISIONS:
        raise ValueError(f"config precision: {precision!r}, expected fp32 or fp16 (no bf16: "
                         "MindSpore 2.10's CPU kernels reject it, on GPU it is untried)")
    if device == "CPU":
        os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
    ms.set_device(device)
    ms.set_context(mode=MODES[mode])
    return device


def make_all_reduce_sum(world_size: int):
    """``[integer counts] -> [their sums over the ranks]`` (exact for counts below 2**48 on
    up to 4096 ranks; identity on one rank)."""
    if world_size == 1:
        return lambda values: [float(v) for v in values]
    all_reduce = ops.AllReduce()
    base = 1 << _DIGIT_BITS

    def all_reduce_sum(values):
        counts = [int(round(v)) for v in values]
        if any(c < 0 or c >= base ** _DIGITS for c in counts):
            raise ValueError(f"counts {counts} are outside 0 .. 2**{_DIGIT_BITS * _DIGITS}")
        digits = np.array([[(c >> (_DIGIT_BITS * k)) & (base - 1) for k in range(_DIGITS)]
                           for c in counts], dtype=np.float32)
        sums = all_reduce(ms.Tensor(digits)).asnumpy().astype(np.int64)
        return [float(sum(int(s) << (_DIGIT_BITS * k) for k, s in enumerate(row)))
                for row in sums]
    return all_reduce_sum


def make_optimizer(net: nn.Cell, config, learning_rates: list[float]) -> nn.Optimizer:
    """SGD with momentum over the trainable parameters, ``weight_decay`` on the weights and
    ``norm_weight_decay`` on the 1-D parameters, one learning rate per update.

    Raises:
        ValueError: ``optimizer`` is not sgd.
    """
    kind = str(setting(config, "optimizer", "sgd"))
    if kind != "sgd":
        raise ValueError(f"config optimizer: {kind!r}, expected sgd")
    decay = float(setting(config, "weight_decay", 0.0))
    norm_decay = float(setting(config, "norm_weight_decay", decay))
    params = net.trainable_params()
    groups = [{"params": [p for p in params if len(p.shape) > 1], "weight_decay": decay},
              {"params": [p for p in params if len(p.shape) <= 1], "weight_decay": norm_decay}]
    return nn.SGD(groups, learning_rate=learning_rates,
                  momentum=float(setting(config, "momentum", 0.0)),
                  nesterov=bool(setting(config, "nesterov", False)))


def train(case) -> int:
    """One worker's round (``run``'s, on a worker)."""
    start = start_case(case.description)
    config, rank, world = start.config, start.rank, start.world_size
    settings = LoopSettings.from_config(config)
    device = configure_device(config)
    if world > 1:
        from mindspore.communication import init
        init()
    ms.set_seed(settings.seed)  # the same initial weights on every rank

    train_set = imagenet_folders.train_dataset(start.data_dir, config, rank, world)
    val_set = imagenet_folders.val_dataset(start.data_dir, config, rank, world)
    num_classes = len(imagenet_folders.class_names(start.data_dir))
    steps_per_epoch = train_set.get_dataset_size()
    total_steps = settings.total_steps(steps_per_epoch, world)
    schedule.check(config)
    learning_rates = schedule.per_update(steps_per_epoch, total_steps, config)

    net = case.build_model(config, num_classes=num_classes)
    start.log.log(perflog.CONVERT_MODEL, {
        "model": "resnet50", "num_labels": num_classes, "parameters": trainable_parameters(net),
        "framework": f"mindspore {ms.__version__}", "device_target": device})
    optimizer = make_optimizer(net, config, learning_rates)
    start.log.log(perflog.CREATE_OPTIMIZER, {"optimizer": "SGD",
                                             "learning_rate": float(config["learning_rate"])})
    scaler = None
    if str(setting(config, "precision", "fp32")) == "fp16":
        net = amp.auto_mixed_precision(net, "O2", dtype=ms.float16)
        scaler = amp.StaticLossScaler(float(setting(config, "loss_scale", 1024.0)))
        start.log.log(perflog.MODEL_TO_FP16, {"precision": "fp16",
                                              "loss_scale": scaler.scale_value.asnumpy().item()})
    loss_fn = nn.CrossEntropyLoss(label_smoothing=float(setting(config, "label_smoothing", 0.0)))

    def forward(images, labels):
        loss = loss_fn(net(images).astype(ms.float32), labels)
        return scaler.scale(loss) if scaler is not None else loss

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    reducer = (nn.DistributedGradReducer(optimizer.parameters, mean=True, degree=world)
               if world > 1 else None)
    if reducer is not None:
        start.log.log(perflog.MODEL_TO_DDP, {"world_size": world})

    def update(images, labels):
        loss, grads = grad_fn(images, labels)
        if scaler is not None:
            loss, grads = scaler.unscale(loss), scaler.unscale(grads)
        if reducer is not None:
            grads = reducer(grads)
        optimizer(grads)
        return loss

    if str(setting(config, "mode", "graph")) == "graph":
        update = ms.jit(update)
    done = [0]

    def train_step(batch) -> float:
        loss = float(update(*batch).asnumpy())
        done[0] += 1
        return loss

    train_batches = train_set.create_tuple_iterator(num_epochs=-1)
    val_batches = val_set.create_tuple_iterator(num_epochs=-1)
    all_reduce_sum = make_all_reduce_sum(world)

    def epoch_batches(epoch: int):
        net.set_train(True)
        return train_batches  # each pass over it is one epoch, freshly shuffled

    def evaluate() -> float:
        net.set_train(False)
        correct = count = 0
        for images, labels in val_batches:
            correct += int((net(images).argmax(axis=1) == labels).sum().asnumpy())
            count += int(labels.shape[0])
        net.set_train(True)
        correct, count = all_reduce_sum([correct, count])
        return 100.0 * correct / max(count, 1)

    loop = TrainingLoop(settings, Target("acc1", float(config["target_acc1"])), start,
                        all_reduce_sum=all_reduce_sum if world > 1 else None)
    loop.init_done()
    progress = loop.run(
        epoch_batches=epoch_batches, train_step=train_step,
        batch_samples=lambda batch: int(batch[1].shape[0]), evaluate=evaluate,
        learning_rate=lambda: learning_rates[min(done[0], total_steps - 1)])
    # Always the most frequent training class, in %.
    loop.finish(progress, input_blind=lambda: 100.0 * majority_share(
        imagenet_folders.folder_labels(start.data_dir, "train"),
        imagenet_folders.folder_labels(start.data_dir, "val")))
    return 0


def serve_scheduler() -> int:
    """The msrun scheduler's part. msrun runs the entry once more, beside the workers, as its
    cluster's scheduler (``MS_ROLE=MS_SCHED``, ``RANK_ID`` 0: mindspore 2.10
    ``parallel/cluster/process_entity/_api.py``); it must train nothing and write no rank log.
    With several workers it serves their rendezvous (``init`` returns, or ends the process,
    once every worker has left); with one there is no cluster to serve."""
    if int(os.environ.get("MS_WORKER_NUM", "1")) > 1:
        from mindspore.communication import init
        init()
    return 0


def leave(status: int) -> None:
    """End the process after MindSpore's exit handlers: they leave msrun's cluster (its
    scheduler otherwise reports the rank as timed out and the job as failed), and
    ``exit_rank`` then skips the interpreter's teardown, where MindSpore's ``Cell.__del__``
    would print "Exception ignored" noise."""
    atexit._run_exitfuncs()
    exit_rank(status)


def run(case) -> int:
    """The case's driver (case.yml ``driver: resnet50.mindspore.training``;
    ``driver.run.Case``): msrun starts the same command as its scheduler (``MS_ROLE``
    ``MS_SCHED``) and as each worker; either way the process ends here (:func:`leave`)."""
    leave(serve_scheduler() if os.environ.get("MS_ROLE") == "MS_SCHED" else train(case))
