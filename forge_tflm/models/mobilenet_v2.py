"""MobileNetV2 (Sandler et al. 2018) for small inputs, width multiplier 0.5 by default.

The ImageNet network downsamples 32x; on 32x32 images that leaves 1x1 maps, so
the stem and the 160-channel stage keep stride 1 for 32x32 inputs (8x in all,
final map 4x4). Keeping the 24-channel stage at full resolution too (another
common CIFAR variant) costs about 4x the compute for a point or two of
accuracy: too much for a microcontroller. For 64x64 inputs (Tiny-ImageNet) the
stem is strided, giving the same 4x4 final map. Every conv is
followed by BatchNormalization (expansion 1x1, depthwise 3x3, projection 1x1,
stem and head), with ReLU6 after all but the projection.
"""

from __future__ import annotations

import keras
from keras import layers

# (expansion t, output channels c, repeats n, first stride s) at 32x32 input.
_CIFAR_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 1),
    (6, 320, 1, 1),
)


def _make_divisible(v: float, divisor: int = 8) -> int:
  new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
  if new_v < 0.9 * v:
    new_v += divisor
  return new_v


def _reg(l2):
  return keras.regularizers.L2(l2) if l2 else None


def _bn(x, name):
  return layers.BatchNormalization(momentum=0.9, epsilon=1e-3, name=f"{name}_bn")(x)


def _inverted_residual(x, expansion, filters, stride, name, l2):
  in_ch = x.shape[-1]
  y = x
  if expansion != 1:
    y = layers.Conv2D(in_ch * expansion, 1, use_bias=False, kernel_regularizer=_reg(l2),
                      name=f"{name}_expand_conv")(y)
    y = _bn(y, f"{name}_expand")
    y = layers.ReLU(6.0, name=f"{name}_expand_relu")(y)
  y = layers.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False,
                             name=f"{name}_dw_conv")(y)
  y = _bn(y, f"{name}_dw")
  y = layers.ReLU(6.0, name=f"{name}_dw_relu")(y)
  y = layers.Conv2D(filters, 1, use_bias=False, kernel_regularizer=_reg(l2),
                    name=f"{name}_project_conv")(y)
  y = _bn(y, f"{name}_project")
  if stride == 1 and in_ch == filters:
    y = layers.Add(name=f"{name}_add")([x, y])
  return y


def mobilenet_v2(alpha: float = 0.5, num_classes: int = 10, input_shape=(32, 32, 3),
                 weight_decay: float = 0.0, dropout: float = 0.0) -> keras.Model:
  """MobileNetV2-`alpha` for 32x32 or 64x64 inputs (float, normalized by the caller)."""
  size = input_shape[0]
  if input_shape[0] != input_shape[1] or size not in (32, 64):
    raise ValueError(f"input_shape must be 32x32 or 64x64, got {input_shape}")
  l2 = weight_decay / 2.0
  inputs = keras.Input(shape=input_shape, name="image")
  x = layers.Conv2D(_make_divisible(32 * alpha), 3, strides=size // 32, padding="same",
                    use_bias=False,
                    kernel_regularizer=_reg(l2), name="stem_conv")(inputs)
  x = _bn(x, "stem")
  x = layers.ReLU(6.0, name="stem_relu")(x)
  index = 0
  for t, c, n, s in _CIFAR_BLOCKS:
    filters = _make_divisible(c * alpha)
    for i in range(n):
      x = _inverted_residual(x, t, filters, s if i == 0 else 1, f"block{index}", l2)
      index += 1
  head = 1280 if alpha <= 1.0 else _make_divisible(1280 * alpha)
  x = layers.Conv2D(head, 1, use_bias=False, kernel_regularizer=_reg(l2),
                    name="head_conv")(x)
  x = _bn(x, "head")
  x = layers.ReLU(6.0, name="head_relu")(x)
  x = layers.GlobalAveragePooling2D(name="pool")(x)
  if dropout:
    x = layers.Dropout(dropout, name="dropout")(x)
  outputs = layers.Dense(num_classes, kernel_regularizer=_reg(l2), name="logits")(x)
  return keras.Model(inputs, outputs, name=f"mobilenet_v2_{alpha:g}_{size}")
