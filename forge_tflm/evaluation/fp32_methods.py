"""Methods on the float Keras model: source-fp32, bn-adapt, tent.

bn-adapt  normalizes with the test batch's own statistics (BN in training mode);
tent      (Wang et al. 2021) additionally takes one Adam step (lr 1e-3) per batch on
          the BN affine parameters to minimize the mean prediction entropy; the
          prediction comes from the pre-update forward pass.
Weights (and optimizer state) are restored at the start of every stream.
"""

from __future__ import annotations

import numpy as np


class Fp32Method:
  name = ""
  adaptive = False

  def __init__(self, model, input_contract):
    self.model = model
    self.contract = input_contract
    self._initial = [w.copy() for w in model.get_weights()]

  def reset(self) -> None:
    self.model.set_weights(self._initial)

  def diagnostics(self) -> dict:
    """What the method records per ordering beside its accuracy (JSON-ready)."""
    return {}

  def to_float(self, images_uint8: np.ndarray) -> np.ndarray:
    return self.contract.to_float(images_uint8)

  def predict(self, images_uint8: np.ndarray) -> np.ndarray:
    raise NotImplementedError


class SourceFp32(Fp32Method):
  name = "source-fp32"
  training = False  # BN mode of the forward pass.

  def __init__(self, model, input_contract):
    super().__init__(model, input_contract)
    import tensorflow as tf
    self._fn = tf.function(lambda x: model(x, training=self.training),
                           reduce_retracing=True)

  def predict(self, images_uint8):
    return np.asarray(self._fn(self.to_float(images_uint8)))


class BNAdapt(SourceFp32):
  name = "bn-adapt"
  adaptive = True
  # BN uses batch statistics (and updates moving statistics, which reset()
  # undoes between streams).
  training = True


class Tent(Fp32Method):
  name = "tent"
  adaptive = True

  def __init__(self, model, input_contract, learning_rate: float = 1e-3):
    super().__init__(model, input_contract)
    import keras
    import tensorflow as tf

    self.params = [v for layer in _all_layers(model)
                   if isinstance(layer, keras.layers.BatchNormalization)
                   for v in (layer.gamma, layer.beta) if v is not None]
    self.learning_rate = learning_rate
    self._make_optimizer()

    @tf.function(reduce_retracing=True)
    def step(x):
      with tf.GradientTape() as tape:
        logits = model(x, training=True)
        p = tf.nn.softmax(logits)
        entropy = -tf.reduce_mean(tf.reduce_sum(p * tf.nn.log_softmax(logits), axis=1))
      # Differentiate w.r.t. the backing tf.Variables: a Keras variable itself
      # is not a tape source (its gradient would silently be None).
      grads = tape.gradient(entropy, [p.value for p in self.params])
      self.optimizer.apply_gradients(zip(grads, self.params))
      return logits

    self._step = step

  def _make_optimizer(self):
    import keras
    self.optimizer = keras.optimizers.Adam(self.learning_rate)
    self.optimizer.build(self.params)
    # Everything the optimizer holds (moments, step count, and the learning
    # rate, which Keras 3 also keeps as a variable) as it was when built.
    self._optimizer_initial = [v.numpy().copy() for v in self.optimizer.variables]

  def reset(self):
    super().reset()
    # Restore the optimizer in place (a new optimizer would retrace the step).
    # Zeroing every optimizer variable instead would zero the learning rate and
    # silently turn tent into bn-adapt.
    for v, initial in zip(self.optimizer.variables, self._optimizer_initial):
      v.assign(initial)

  def predict(self, images_uint8):
    return np.asarray(self._step(self.to_float(images_uint8)))


def _all_layers(model):
  import keras
  for layer in model.layers:
    if isinstance(layer, keras.Model):
      yield from _all_layers(layer)
    else:
      yield layer


FP32_METHODS = {m.name: m for m in (SourceFp32, BNAdapt, Tent)}
