"""Keras model definitions with Conv->BN sites for FORGE.

Models take float images in [0, 1] (pixels / 255): the int8 input quantization of
the converted model is then exact for uint8 pixels (scale 1/255, zero point -128).
"""

from __future__ import annotations

from typing import Callable

import keras

from forge_tflm.models.mobilenet_v2 import mobilenet_v2
from forge_tflm.models.resnet_cifar import resnet20, resnet_cifar

# Name -> builder(num_classes, input_shape, weight_decay).
MODELS: dict[str, Callable[..., keras.Model]] = {
    "resnet20": lambda num_classes, input_shape, weight_decay: resnet20(
        num_classes, input_shape, weight_decay),
    "mobilenet_v2_0.5": lambda num_classes, input_shape, weight_decay: mobilenet_v2(
        0.5, num_classes, input_shape, weight_decay),
}


def build_model(name: str, num_classes: int, input_shape=(32, 32, 3),
                weight_decay: float = 0.0) -> keras.Model:
  if name not in MODELS:
    raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
  return MODELS[name](num_classes, tuple(input_shape), weight_decay)


__all__ = ["MODELS", "build_model", "mobilenet_v2", "resnet20", "resnet_cifar"]
