"""Stochastic weight averaging (Izmailov et al., 2018) for `forge_tflm train`.

The last `swa_epochs` epochs run at a constant learning rate; the trainable
weights at the end of each of them are averaged (an equal-weight running mean).
The averaged network never ran forward during training, so its BatchNorm
moving statistics are recomputed afterwards with one pass over the training
stream, as `torch.optim.swa_utils.update_bn` does.

That pass must see the *augmented* stream the statistics were trained on: on the
88.24% ResNet-20 (stage 3 in models/README.md), re-estimating them from
un-augmented training images costs about 3 points of test accuracy (88.24% ->
84.96%), because 4-pixel zero padding puts black borders into every random crop.
"""

from __future__ import annotations

import io

import numpy as np


class WeightAverage:
  """Equal-weight running mean of a model's trainable weights."""

  def __init__(self, weights: list[np.ndarray] | None = None, count: int = 0):
    self.weights = weights
    self.count = count

  def add(self, weights: list[np.ndarray]) -> None:
    weights = [np.asarray(w, np.float64) for w in weights]
    if self.weights is None:
      self.weights, self.count = weights, 1
      return
    if [w.shape for w in weights] != [w.shape for w in self.weights]:
      raise ValueError("weights to average differ in shape")
    self.count += 1
    # Incremental mean: exact to float64 round-off at any count.
    self.weights = [a + (w - a) / self.count for a, w in zip(self.weights, weights)]

  def to_bytes(self) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, count=self.count, *(self.weights or []))
    return buf.getvalue()

  @classmethod
  def from_bytes(cls, data: bytes) -> "WeightAverage":
    with np.load(io.BytesIO(data)) as f:
      count = int(f["count"])
      weights = [f[f"arr_{i}"] for i in range(len(f.files) - 1)]
    return cls(weights or None, count)


def recompute_batchnorm_statistics(model, batches) -> int:
  """Sets every BatchNorm layer's moving mean/variance to the average over `batches`.

  Each batch runs forward in training mode (so every layer normalizes with its
  batch statistics, as during training) while the layers' momentum follows
  t / (t + 1), which turns the exponential moving average into the plain mean
  over all batches seen. Returns the number of batches used.
  """
  import keras

  layers = [l for l in _all_layers(model) if isinstance(l, keras.layers.BatchNormalization)]
  momenta = [l.momentum for l in layers]
  count = 0
  try:
    for images in batches:
      for layer in layers:
        layer.momentum = count / (count + 1.0)  # 0 on the first batch: replace, not blend.
      model(images, training=True)
      count += 1
    return count
  finally:
    for layer, momentum in zip(layers, momenta):
      layer.momentum = momentum


def _all_layers(model):
  for layer in model.layers:
    yield layer
    if hasattr(layer, "layers"):  # Nested models.
      yield from _all_layers(layer)
