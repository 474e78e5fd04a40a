"""Small float Keras models with non-trivial BN statistics, for converter tests."""

import keras
import numpy as np
from keras import layers


def randomize_bn(model: keras.Model, seed: int = 0) -> keras.Model:
  """Gives every BN layer realistic, non-identity gamma/beta/mean/var."""
  rng = np.random.default_rng(seed)
  for layer in model.layers:
    if isinstance(layer, keras.Model):
      randomize_bn(layer, seed + 1)
    elif isinstance(layer, layers.BatchNormalization):
      c = layer.gamma.shape[0]
      layer.set_weights([
          rng.uniform(0.5, 1.5, c) * rng.choice([-1, 1], c, p=[0.1, 0.9]),  # gamma
          rng.normal(0, 0.3, c),                                             # beta
          rng.normal(0, 0.2, c),                                             # moving mean
          rng.uniform(0.2, 2.0, c),                                          # moving var
      ])
  return model


def tiny_resnet(size: int = 16, classes: int = 10, seed: int = 0) -> keras.Model:
  keras.utils.set_random_seed(seed)
  x_in = keras.Input((size, size, 3), name="image")
  x = layers.Conv2D(8, 3, padding="same", use_bias=False, name="stem_conv")(x_in)
  x = layers.BatchNormalization(name="stem_bn")(x)
  x = layers.ReLU(name="stem_relu")(x)
  y = layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False, name="b1_conv")(x)
  y = layers.BatchNormalization(name="b1_bn")(y)
  y = layers.ReLU(name="b1_relu")(y)
  y = layers.Conv2D(16, 3, padding="same", use_bias=False, name="b2_conv")(y)
  y = layers.BatchNormalization(name="b2_bn")(y)
  s = layers.Conv2D(16, 1, strides=2, use_bias=False, name="proj_conv")(x)
  s = layers.BatchNormalization(name="proj_bn")(s)
  x = layers.ReLU(name="add_relu")(layers.Add(name="add")([y, s]))
  x = layers.DepthwiseConv2D(3, padding="same", use_bias=False, name="dw_conv")(x)
  x = layers.BatchNormalization(name="dw_bn", epsilon=1e-3)(x)
  x = layers.ReLU(6.0, name="dw_relu6")(x)
  x = layers.GlobalAveragePooling2D(name="pool")(x)
  out = layers.Dense(classes, name="logits")(x)
  return randomize_bn(keras.Model(x_in, out, name="tiny_resnet"), seed)


TINY_SITES = {"stem_bn": ("conv", "relu", 8), "b1_bn": ("conv", "relu", 16),
              "b2_bn": ("conv", "none", 16), "proj_bn": ("conv", "none", 16),
              "dw_bn": ("depthwise", "relu6", 16)}


def nested_model(size: int = 16) -> keras.Model:
  inner_in = keras.Input((size, size, 3))
  h = layers.Conv2D(4, 3, padding="same", name="inner_conv")(inner_in)
  h = layers.BatchNormalization(name="inner_bn")(h)
  inner = keras.Model(inner_in, layers.ReLU(name="inner_relu")(h), name="backbone")
  seq = keras.Sequential([layers.Conv2D(4, 1, name="seq_conv"),
                          layers.BatchNormalization(name="seq_bn")], name="head")
  x_in = keras.Input((size, size, 3))
  x = seq(inner(x_in))
  out = layers.Dense(3)(layers.GlobalAveragePooling2D()(x))
  return randomize_bn(keras.Model(x_in, out, name="nested"))


def random_images(n: int, size: int = 16, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def convert_tiny(directory, options=None, size: int = 16, calibration: int = 32):
  """Saves tiny_resnet to `directory` and converts it; returns (keras path, result)."""
  import os

  from forge_tflm.converter.options import ConvertOptions
  from forge_tflm.converter.pipeline import convert
  from forge_tflm.data.imageset import ImageSet

  src = os.path.join(str(directory), "tiny.keras")
  tiny_resnet(size=size).save(src)
  calib = ImageSet(random_images(calibration, size=size), np.zeros(calibration, np.int64),
                   ("x",), "generated")
  result = convert(src, os.path.join(str(directory), "tiny.tflite"), calib,
                   options or ConvertOptions())
  return src, result
