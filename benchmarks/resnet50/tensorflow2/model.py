"""ResNet-50 for the tensorflow2 case: ``keras.applications.ResNet50``, randomly initialised.

Keras' ResNet50 is ResNet v1 as He et al. 2015 describe it (the stride in the first 1x1
convolution of a downsampling block; torchvision's resnet50 is v1.5, the stride in the 3x3):
25,636,712 parameters with the 1000-class head at 224x224, 3.858e9 multiply-adds a forward pass
(its Conv2D and Dense layers; v1.5: 4.089e9). FlagPerf's tensorflow2 case trains
tensorflow/models' ``resnet_model.resnet50``, the same v1 network with He-normal convolutions,
a N(0, 0.01) classifier, an L2 penalty on the convolution and dense kernels and BatchNorm
momentum 0.9; here the kernels are drawn again that way (``kernel_init``), the penalty is added
to the loss (``l2_penalty``) and the momentum set on Keras' BatchNorm layers (``bn_momentum``).
"""

from __future__ import annotations

from typing import Any, Mapping

import keras
import tensorflow as tf


def build_model(config: Mapping[str, Any], num_classes: int,
                data_dir: str | None = None) -> keras.Model:
    """ResNet-50 v1: images ``[batch, image_size, image_size, 3]`` (channels last, normalised)
    -> logits ``[batch, num_classes]`` (no softmax: the loss takes logits).

    Config: ``image_size`` (at least 32, Keras' minimum), ``kernel_init`` (``he_normal``:
    tensorflow/models'; ``keras`` or absent: Keras' Glorot-uniform), ``bn_momentum``
    (BatchNorm's moving average momentum; Keras' own is 0.99, tensorflow/models' 0.9; absent:
    Keras'), ``zero_init_residual`` (the
    last BatchNorm of every bottleneck starts at gamma 0, so each residual block begins as the
    identity: Goyal et al. 2017, "Accurate, Large Minibatch SGD").

    Raises:
        ValueError: ``image_size`` under 32, an unknown ``kernel_init``.
    """
    size = int(config["image_size"])
    if size < 32:
        raise ValueError(f"config image_size: {size}, Keras' ResNet50 takes 32 or more")
    model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3),
                                        classes=num_classes, classifier_activation=None)
    if config.get("kernel_init") == "he_normal":
        # tensorflow/models' resnet_model: He-normal convolutions, a N(0, 0.01) classifier
        # (Keras' applications leave Glorot-uniform, its layers' default).
        # One initializer per layer: each takes its seed from Keras' global seed when made, and
        # one initializer draws the same values at every call of the same shape.
        for layer in model.layers:
            if isinstance(layer, keras.layers.Conv2D):
                layer.kernel.assign(keras.initializers.HeNormal()(layer.kernel.shape))
            elif isinstance(layer, keras.layers.Dense):
                layer.kernel.assign(
                    keras.initializers.RandomNormal(stddev=0.01)(layer.kernel.shape))
    elif config.get("kernel_init", "keras") not in (None, "keras"):
        raise ValueError(f"config kernel_init: {config['kernel_init']!r}, expected keras or "
                         "he_normal")
    momentum = config.get("bn_momentum")
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            if momentum is not None:
                layer.momentum = float(momentum)
            # conv<stage>_block<n>_3_bn: a bottleneck's last BatchNorm, before the addition.
            if config.get("zero_init_residual") and layer.name.endswith("_3_bn"):
                layer.gamma.assign(tf.zeros_like(layer.gamma))
    return model


def penalised_weights(model: keras.Model) -> list:
    """The weights tensorflow/models' resnet50 puts its L2 regularizer on: every Conv2D and
    Dense kernel (not biases, not BatchNorm)."""
    return [layer.kernel for layer in model.layers
            if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense))]


def l2_penalty(weights: list, factor: float) -> tf.Tensor:
    """``factor * sum(w ** 2)`` over ``weights`` in float32: Keras' ``regularizers.L2(factor)``
    summed (no 1/2: its gradient is ``2 * factor * w``, torch SGD's weight decay ``2 * factor``)."""
    return factor * tf.add_n([tf.reduce_sum(tf.square(tf.cast(w, tf.float32))) for w in weights])


def parameter_count(model: keras.Model) -> int:
    """Every weight of the model, trainable or not (BatchNorm's moving statistics included),
    as ``Model.count_params`` and the Keras applications table count them."""
    return int(model.count_params())
