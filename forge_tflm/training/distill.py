"""Knowledge distillation (Hinton et al., 2015) for `forge_tflm train`.

The student is trained on

  loss = (1 - w) * CE(y, s) + w * T^2 * KL(p_T || softmax(s / T)),
  p_T  = mean over teachers of softmax(t_i / T),

with s the student's logits, t_i each teacher's logits on the *same augmented
batch*, T the temperature and w the distillation weight (T^2 keeps the soft
term's gradient on the scale of the hard one). Several teachers form an
ensemble: their softened probabilities are averaged.

The teachers run in the input pipeline, which appends p_T to each batch's
one-hot labels; the loss splits the two again. Evaluated on labels alone (the
test split), the loss is the plain cross-entropy and the accuracy metric is the
usual one, so test figures mean the same with or without teachers.
"""

from __future__ import annotations

import os

import keras
from keras import ops


def _split(y_true, y_pred):
  """(one-hot labels, teacher probabilities or None) from the pipeline's targets."""
  num_classes = y_pred.shape[-1]
  if y_true.shape[-1] == num_classes:
    return y_true, None
  if y_true.shape[-1] != 2 * num_classes:
    raise ValueError(f"targets have {y_true.shape[-1]} columns; expected {num_classes}"
                     f" (labels) or {2 * num_classes} (labels + teacher probabilities)")
  return y_true[..., :num_classes], y_true[..., num_classes:]


@keras.saving.register_keras_serializable(package="forge_tflm")
class DistillationLoss(keras.losses.Loss):
  """Hard-label cross-entropy blended with the KL divergence to the teachers."""

  def __init__(self, weight: float = 0.9, temperature: float = 4.0,
               label_smoothing: float = 0.0, name: str = "distillation", **kwargs):
    super().__init__(name=name, **kwargs)
    self.weight = weight
    self.temperature = temperature
    self.label_smoothing = label_smoothing

  def call(self, y_true, y_pred):
    labels, soft = _split(y_true, y_pred)
    hard = keras.losses.categorical_crossentropy(
        labels, y_pred, from_logits=True, label_smoothing=self.label_smoothing)
    if soft is None:
      return hard
    t = self.temperature
    log_student = ops.log_softmax(y_pred / t, axis=-1)
    # KL(p || q) = sum p (log p - log q); the floor makes 0 * log 0 come out as 0.
    log_soft = ops.log(ops.maximum(soft, 1e-12))
    kl = ops.sum(soft * (log_soft - log_student), axis=-1)
    return (1.0 - self.weight) * hard + self.weight * t * t * kl

  def get_config(self):
    return {**super().get_config(), "weight": self.weight,
            "temperature": self.temperature, "label_smoothing": self.label_smoothing}


@keras.saving.register_keras_serializable(package="forge_tflm")
def hard_label_accuracy(y_true, y_pred):
  """Top-1 accuracy against the one-hot labels, ignoring appended teacher columns."""
  labels, _ = _split(y_true, y_pred)
  return keras.metrics.categorical_accuracy(labels, y_pred)


def accuracy_metric():
  # Named "accuracy" so that logs and `fit` history read the same with teachers.
  return keras.metrics.MeanMetricWrapper(hard_label_accuracy, name="accuracy")


def load_teachers(paths, num_classes: int, input_shape) -> list:
  """Loads the teacher models, checking they fit the student's data."""
  teachers = []
  for path in paths:
    if not os.path.isfile(path):
      raise FileNotFoundError(f"teacher model {path} does not exist")
    teacher = keras.saving.load_model(path, compile=False)
    if tuple(teacher.input_shape[1:]) != tuple(input_shape):
      raise ValueError(f"teacher {path} takes inputs {teacher.input_shape[1:]},"
                       f" the data has {tuple(input_shape)}")
    if teacher.output_shape[-1] != num_classes:
      raise ValueError(f"teacher {path} has {teacher.output_shape[-1]} classes,"
                       f" the data has {num_classes}")
    teachers.append(teacher)
  return teachers


def append_teacher_probabilities(teachers, temperature: float):
  """A tf.data map: (images, one_hot) -> (images, one_hot ++ mean softmax(t / T))."""
  import tensorflow as tf

  def add(images, labels):
    probs = [tf.nn.softmax(tf.cast(t(images, training=False), tf.float32) / temperature)
             for t in teachers]
    return images, tf.concat([labels, tf.add_n(probs) / len(probs)], axis=-1)
  return add
