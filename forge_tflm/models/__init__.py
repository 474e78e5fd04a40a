"""Keras model definitions with Conv->BN sites for FORGE.

Models take float images in [0, 1] (pixels / 255): the int8 input quantization of
the converted model is then exact for uint8 pixels (scale 1/255, zero point -128).

Importing this package does not import Keras (a CLI's --help must not wait for
TensorFlow); the builders load it when called. The architectures themselves:
forge_tflm.models.resnet_cifar, forge_tflm.models.mobilenet_v2.
"""

from __future__ import annotations

# The models `forge_tflm train --model` builds.
MODEL_NAMES = ("mobilenet_v2_0.5", "resnet20")


def build_model(name: str, num_classes: int, input_shape=(32, 32, 3),
                weight_decay: float = 0.0):
  """A fresh keras.Model `name` (one of MODEL_NAMES)."""
  if name == "resnet20":
    from forge_tflm.models.resnet_cifar import resnet20
    return resnet20(num_classes, tuple(input_shape), weight_decay)
  if name == "mobilenet_v2_0.5":
    from forge_tflm.models.mobilenet_v2 import mobilenet_v2
    return mobilenet_v2(0.5, num_classes, tuple(input_shape), weight_decay)
  raise ValueError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")


__all__ = ["MODEL_NAMES", "build_model"]
