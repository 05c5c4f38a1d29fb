"""ResNet-50 trained from scratch on TensorFlow 2 to a top-1 target (FlagPerf resnet50-tensorflow2:
training/benchmarks/resnet50/tensorflow2, tensorflow/models' official resnet).

One process per node using all of its devices: ``tf.distribute.MirroredStrategy`` on one node,
``MultiWorkerMirroredStrategy`` when ``TF_CONFIG`` (the ``tf_config`` launcher) names more than
one worker, ranks as the launcher sets them (``RANK``/``WORLD_SIZE`` = the worker's index and
count, checked against ``TF_CONFIG``). Data: ImageNet TFRecords (format ``imagenet_tfrecord``,
``imagenet_records.py``). Model: ``keras.applications.ResNet50`` (``model.py``). Loss: softmax
cross entropy with ``label_smoothing`` over the global batch plus ``l2_weight_decay`` times the
squared convolution and dense kernels (tensorflow/models' resnet50 regularizer). Optimizer:
SGD with ``momentum`` (``nesterov``), the learning rate per update (``LearningRate``). Metric:
top-1 accuracy in % over the whole validation set, summed over the workers. The loop, events
and FINISHED figures are the framework-free ``driver.training_loop``, as every framework's.

Case keys besides the loop's (``train_batch_size`` and ``eval_batch_size`` are per replica, a
device, as upstream's ``use_per_replica_batch_size``) and model.py's: ``num_classes``,
``num_train_examples`` (null: counted from the shards), ``learning_rate`` (the peak),
``lr_scale_batch`` (null: the rate as given; else it is for this global batch and scales
linearly with the real one: upstream's ``0.1 x batch / 256``), ``lr_scheduler`` (``stepwise``
with ``lr_boundaries`` in epochs and ``lr_multipliers``, ``cosine``, ``constant``),
``lr_warmup_epochs``, ``lr_warmup_decay``, ``momentum``, ``nesterov``, ``label_smoothing``,
``l2_weight_decay``, ``precision`` (fp32 | amp or bf16 | fp16), ``intra_op_threads`` and
``inter_op_threads`` (0: TensorFlow's choice), the data keys of ``imagenet_records.py`` and
``target_acc1``.
"""

import json
import math
import os


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TensorFlow's C++ info lines off
# TensorFlow turns its oneDNN kernels on by itself only on x86 CPUs with AVX-512 VNNI/BF16 or
# AMX; without (AVX2 only, e.g. AMD EPYC Zen 3) its Eigen kernels trained this ResNet-50 at
# 32x32 5.6 times slower (15 against 84 img/s). A value set by the user wins.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import keras
import tensorflow as tf

from driver import perflog
from driver.case_io import setting
from driver.convergence import Target, majority_share
from driver.training_loop import LoopSettings, TrainingLoop, start_case

from . import imagenet_records as records
from .model import l2_penalty, parameter_count, penalised_weights

#: ``precision`` -> Keras' dtype policy (amp runs in bf16, as the torch cases' autocast).
POLICIES = {"fp32": "float32", "amp": "mixed_bfloat16", "bf16": "mixed_bfloat16",
            "fp16": "mixed_float16"}
#: The round's TensorFlow objects, kept until the process ends (``exit_rank``'s ``os._exit``):
#: freed on return, the input iterators cancel and join their pipelines' threads, which took 20
#: to 80 s after FINISHED on two busy cores (py-spy: the main thread in train()'s frame teardown).
KEPT: list = []


class LearningRate(keras.optimizers.schedules.LearningRateSchedule):
    """The learning rate at optimizer update ``step`` (0-based): a linear warmup from
    ``warmup_decay x peak`` over ``warmup_steps``, then ``stepwise`` (``peak x multipliers[i]``
    from ``boundaries[i-1]`` updates on: tensorflow/models' PiecewiseConstantDecay), ``cosine``
    (to 0 at ``total_steps``) or ``constant``.

    Raises:
        ValueError: an unknown kind, or boundaries and multipliers that do not fit.
    """

    def __init__(self, peak: float, kind: str, warmup_steps: int, warmup_decay: float,
                 total_steps: int, boundaries: list[int] = (), multipliers: list[float] = ()):
        if kind not in ("stepwise", "cosine", "constant"):
            raise ValueError(f"config lr_scheduler: {kind!r}, expected stepwise, cosine or "
                             "constant")
        if kind == "stepwise" and len(multipliers) != len(boundaries) + 1:
            raise ValueError("config lr_multipliers: one more than lr_boundaries expected, got "
                             f"{len(multipliers)} for {len(boundaries)}")
        self.peak, self.kind, self.warmup_steps = float(peak), kind, int(warmup_steps)
        self.warmup_decay, self.total_steps = float(warmup_decay), int(total_steps)
        self.boundaries, self.multipliers = list(boundaries), [float(m) for m in multipliers]

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = float(max(1, self.warmup_steps))
        rate = tf.constant(self.peak, tf.float32)
        if self.kind == "stepwise":
            rate = rate * self.multipliers[0]
            for boundary, multiplier in zip(self.boundaries, self.multipliers[1:]):
                rate = tf.where(step >= boundary, self.peak * multiplier, rate)
        elif self.kind == "cosine":
            span = float(max(1, self.total_steps - self.warmup_steps))
            progress = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
            rate = self.peak * 0.5 * (1.0 + tf.cos(math.pi * progress))
        ramp = self.peak * (self.warmup_decay + (1.0 - self.warmup_decay) * step / warmup)
        return tf.where(step < self.warmup_steps, ramp, rate)

    def get_config(self):
        return dict(vars(self))


def cluster() -> tuple[int, int]:
    """``(worker index, workers)`` from ``TF_CONFIG`` (``(0, 1)`` without one).

    Raises:
        ValueError: TF_CONFIG is not JSON of TensorFlow's cluster form.
    """
    text = os.environ.get("TF_CONFIG", "").strip()
    if not text:
        return 0, 1
    try:
        tf_config = json.loads(text)
        workers = len(tf_config.get("cluster", {}).get("worker", []))
        index = int(tf_config.get("task", {}).get("index", 0))
    except (ValueError, AttributeError, TypeError) as err:
        raise ValueError(f"TF_CONFIG: not TensorFlow's cluster JSON ({err})") from None
    return index, max(1, workers)


def sum_over_workers(strategy: tf.distribute.Strategy, local_replicas: int):
    """``[numbers] -> [sums over the workers]``, each worker's numbers counted once (its first
    replica's), through the strategy's all-reduce."""
    def all_reduce_sum(values: list[float]) -> list[float]:
        numbers = tf.constant(values, tf.float64)

        def first_replica_of_worker():
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            return tf.where(replica % local_replicas == 0, numbers, tf.zeros_like(numbers))
        summed = strategy.reduce(tf.distribute.ReduceOp.SUM,
                                 strategy.run(first_replica_of_worker), axis=None)
        return [float(v) for v in summed.numpy()]
    return all_reduce_sum


def run(case) -> int:
    """The case's driver (case.yml ``driver: resnet50.tensorflow2.training``;
    ``driver.run.Case``)."""
    # The clock starts here, after the framework's import, as the pytorch and paddle cases'.
    start = start_case(case.description)
    config, data_dir, log = start.config, start.data_dir, start.log
    try:
        return train(case, start, config, data_dir, log)
    except KeyError as err:  # a key the case needs is not in the configuration
        raise SystemExit(f"{start.args.config}: config has no {err}") from None
    except (ValueError, FileNotFoundError) as err:  # bad configuration or data
        raise SystemExit(f"{start.args.config}: {err}") from None


def train(case, start, config, data_dir, log) -> int:
    index, workers = cluster()
    if (start.rank, start.world_size) != (index, workers):
        raise ValueError(f"TF_CONFIG makes this worker {index} of {workers}, RANK/WORLD_SIZE "
                         f"say {start.rank} of {start.world_size}")
    threading = tf.config.threading
    threading.set_intra_op_parallelism_threads(int(setting(config, "intra_op_threads", 0)))
    threading.set_inter_op_parallelism_threads(int(setting(config, "inter_op_threads", 0)))
    strategy = (tf.distribute.MultiWorkerMirroredStrategy() if workers > 1
                else tf.distribute.MirroredStrategy())
    replicas = strategy.num_replicas_in_sync
    local_replicas = replicas // workers
    precision = str(setting(config, "precision", "fp32"))
    if precision not in POLICIES:
        raise ValueError(f"config precision: {precision!r}, expected one of {', '.join(POLICIES)}")
    keras.mixed_precision.set_global_policy(POLICIES[precision])
    seed = int(setting(config, "seed", 0))
    keras.utils.set_random_seed(seed)

    # Data: this worker's shards, the epoch's updates, the evaluation's padded steps.
    per_replica, eval_per_replica = int(config["train_batch_size"]), int(config["eval_batch_size"])
    train_files = records.shard_files(data_dir, "train")
    val_files = records.shard_files(data_dir, "validation")
    num_train = setting(config, "num_train_examples", None)
    num_train = int(num_train) if num_train else sum(map(records.count_records, train_files))
    val_counts = [records.count_records(path) for path in val_files]
    global_batch = per_replica * replicas
    steps_per_epoch = num_train // global_batch
    if steps_per_epoch < 1:
        raise ValueError(f"config train_batch_size: {per_replica} x {replicas} replicas is more "
                         f"than the {num_train} training images")
    eval_steps = records.eval_steps(val_counts, workers, eval_per_replica, local_replicas)
    train_set = strategy.distribute_datasets_from_function(
        lambda context: records.train_dataset(
            train_files, config, context.num_input_pipelines, context.input_pipeline_id,
            context.get_per_replica_batch_size(global_batch), seed))
    val_set = strategy.distribute_datasets_from_function(
        lambda context: records.eval_dataset(
            val_files, config, context.num_input_pipelines, context.input_pipeline_id,
            eval_per_replica, eval_steps, local_replicas))

    settings = LoopSettings.from_config({**config, "train_batch_size": per_replica * local_replicas,
                                         "eval_batch_size": eval_per_replica * local_replicas})
    peak = float(config["learning_rate"])
    scale_batch = setting(config, "lr_scale_batch", None)
    if scale_batch:
        peak *= global_batch / float(scale_batch)
    schedule = LearningRate(
        peak, str(setting(config, "lr_scheduler", "stepwise")),
        warmup_steps=round(float(setting(config, "lr_warmup_epochs", 0)) * steps_per_epoch),
        warmup_decay=float(setting(config, "lr_warmup_decay", 0.0)),
        total_steps=settings.total_steps(steps_per_epoch, start.world_size),
        boundaries=[int(e) * steps_per_epoch for e in setting(config, "lr_boundaries", [])],
        multipliers=list(setting(config, "lr_multipliers", [1.0])))
    num_classes = int(config["num_classes"])
    smoothing = float(setting(config, "label_smoothing", 0.0))
    l2 = float(setting(config, "l2_weight_decay", 0.0))
    with strategy.scope():
        model = case.build_model(config, num_classes=num_classes)
        log.log(perflog.CONVERT_MODEL, {"model": "resnet50", "num_labels": num_classes,
                                        "parameters": parameter_count(model),
                                        "replicas": replicas})
        optimizer = keras.optimizers.SGD(learning_rate=schedule,
                                         momentum=float(setting(config, "momentum", 0.9)),
                                         nesterov=bool(setting(config, "nesterov", False)))
        if precision == "fp16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
    log.log(perflog.CREATE_OPTIMIZER, {"optimizer": "SGD", "learning_rate": peak})
    if precision != "fp32":
        log.log(perflog.MODEL_TO_FP16, {"precision": precision, "policy": POLICIES[precision]})
    kernels = penalised_weights(model)

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)
            per_image = keras.losses.categorical_crossentropy(
                tf.one_hot(labels, num_classes), logits, from_logits=True,
                label_smoothing=smoothing)
            loss = tf.nn.compute_average_loss(per_image, global_batch_size=global_batch)
            if l2:
                loss += tf.nn.scale_regularization_loss(l2_penalty(kernels, l2))
            scaled = optimizer.scale_loss(loss) if precision == "fp16" else loss
        gradients = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch):
        losses = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    def replica_eval(images, labels, weights):
        predicted = tf.argmax(model(images, training=False), axis=-1, output_type=tf.int32)
        correct = tf.reduce_sum(tf.cast(predicted == labels, tf.float32) * weights)
        return tf.stack([correct, tf.reduce_sum(weights)])

    @tf.function
    def eval_step(batch):
        return strategy.reduce(tf.distribute.ReduceOp.SUM,
                               strategy.run(replica_eval, args=batch), axis=None)

    # Graphs traced before the clock's training phase: building them is initialisation.
    train_step.get_concrete_function(train_set.element_spec)
    eval_step.get_concrete_function(val_set.element_spec)
    total_val = sum(val_counts)

    val_batches = iter(val_set)

    def evaluate() -> float:
        correct = counted = 0.0
        for _ in range(eval_steps):
            summed = eval_step(next(val_batches)).numpy()
            correct, counted = correct + float(summed[0]), counted + float(summed[1])
        if round(counted) != total_val:
            raise RuntimeError(f"evaluated {counted:.0f} images of {total_val}")
        return 100.0 * correct / total_val

    stream = iter(train_set)

    def epoch_batches(epoch: int):
        for _ in range(steps_per_epoch):
            yield next(stream)

    samples = per_replica * local_replicas
    loop = TrainingLoop(settings, Target("acc1", float(config["target_acc1"])), start,
                        all_reduce_sum=(sum_over_workers(strategy, local_replicas)
                                        if workers > 1 else None))
    loop.init_done()
    progress = loop.run(epoch_batches=epoch_batches, train_step=train_step,
                        batch_samples=lambda batch: samples, evaluate=evaluate,
                        learning_rate=lambda: schedule(optimizer.iterations))
    # Always the most frequent training class, in %.
    loop.finish(progress, input_blind=lambda: 100.0 * majority_share(
        records.record_labels(train_files),
        records.record_labels(val_files)))
    KEPT.extend((stream, val_batches, train_set, val_set, model, optimizer, strategy))
    return 0

