"""CIFAR ResNet (He et al. 2016, section 4.2) with 1x1-conv+BN downsample shortcuts.

ResNet-20: a 3x3 stem, three stages of three basic blocks (16, 32, 64 filters),
global average pooling and a dense classifier. Every convolution is followed by
BatchNormalization, which gives 21 Conv->BN sites (19 on the main path, 2 on the
projection shortcuts) and 784 BN channels.
"""

from __future__ import annotations

import keras
from keras import layers

_INIT = "he_normal"


def _conv_bn(x, filters, kernel, stride, name, l2):
  x = layers.Conv2D(filters, kernel, strides=stride, padding="same",
                    use_bias=False, kernel_initializer=_INIT,
                    kernel_regularizer=keras.regularizers.L2(l2) if l2 else None,
                    name=f"{name}_conv")(x)
  return layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=f"{name}_bn")(x)


def _basic_block(x, filters, stride, name, l2):
  shortcut = x
  y = _conv_bn(x, filters, 3, stride, f"{name}_1", l2)
  y = layers.ReLU(name=f"{name}_1_relu")(y)
  y = _conv_bn(y, filters, 3, 1, f"{name}_2", l2)
  if stride != 1 or x.shape[-1] != filters:
    shortcut = _conv_bn(x, filters, 1, stride, f"{name}_proj", l2)
  y = layers.Add(name=f"{name}_add")([y, shortcut])
  return layers.ReLU(name=f"{name}_out")(y)


def resnet_cifar(depth: int = 20, num_classes: int = 10,
                 input_shape=(32, 32, 3), weight_decay: float = 0.0) -> keras.Model:
  """CIFAR ResNet-`depth` (depth = 6n + 2) taking float inputs normalized by the caller.

  `weight_decay` is the coefficient of the classic coupled L2 penalty on conv and
  dense kernels (the gradient gets weight_decay * w).
  """
  if (depth - 2) % 6:
    raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
  blocks = (depth - 2) // 6
  l2 = weight_decay / 2.0  # keras L2(l) penalizes l*sum(w^2): gradient 2*l*w.
  inputs = keras.Input(shape=input_shape, name="image")
  x = _conv_bn(inputs, 16, 3, 1, "stem", l2)
  x = layers.ReLU(name="stem_relu")(x)
  for stage, filters in enumerate((16, 32, 64)):
    for block in range(blocks):
      stride = 2 if stage > 0 and block == 0 else 1
      x = _basic_block(x, filters, stride, f"stage{stage + 1}_block{block + 1}", l2)
  x = layers.GlobalAveragePooling2D(name="pool")(x)
  outputs = layers.Dense(num_classes, kernel_initializer=_INIT,
                         kernel_regularizer=keras.regularizers.L2(l2) if l2 else None,
                         name="logits")(x)
  return keras.Model(inputs, outputs, name=f"resnet{depth}_cifar")


def resnet20(num_classes: int = 10, input_shape=(32, 32, 3),
             weight_decay: float = 0.0) -> keras.Model:
  return resnet_cifar(20, num_classes, input_shape, weight_decay)
