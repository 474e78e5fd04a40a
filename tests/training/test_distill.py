"""Distillation: the loss against its formula, the metric, the teachers' targets."""

import numpy as np
import pytest

from forge_tflm.training import distill
from forge_tflm.training.train import TrainConfig, recipe


def _softmax(z):
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _cross_entropy(labels, logits):
  return -(labels * np.log(_softmax(logits))).sum(-1)


def test_loss_is_the_weighted_sum_of_cross_entropy_and_scaled_kl():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(6, 4)).astype(np.float32)
  labels = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 6)]
  soft = _softmax(rng.normal(size=(6, 4)) / 2.0).astype(np.float32)
  soft[0] = [0.0, 1.0, 0.0, 0.0]  # Zero probabilities: 0 * log 0 counts as 0.
  w, t = 0.7, 2.0
  loss = distill.DistillationLoss(weight=w, temperature=t)
  got = float(loss(np.concatenate([labels, soft], -1), logits))
  q = _softmax(logits / t)
  kl = np.where(soft > 0, soft * (np.log(np.maximum(soft, 1e-12)) - np.log(q)), 0).sum(-1)
  want = np.mean((1 - w) * _cross_entropy(labels, logits) + w * t * t * kl)
  assert got == pytest.approx(want, rel=1e-5)
  # On labels alone (the test split) it is the plain cross-entropy.
  assert float(loss(labels, logits)) == pytest.approx(
      np.mean(_cross_entropy(labels, logits)), rel=1e-5)
  # A student that matches its teacher pays only the hard-label term.
  same = distill.DistillationLoss(weight=w, temperature=t)(
      np.concatenate([labels, _softmax(logits / t)], -1), logits)
  assert float(same) == pytest.approx(np.mean((1 - w) * _cross_entropy(labels, logits)),
                                      rel=1e-4)
  with pytest.raises(ValueError, match="expected 4"):
    loss(np.zeros((6, 5), np.float32), logits)


def test_loss_survives_serialization():
  import keras
  loss = distill.DistillationLoss(weight=0.5, temperature=3.0, label_smoothing=0.1)
  back = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
  assert isinstance(back, distill.DistillationLoss)
  assert (back.weight, back.temperature, back.label_smoothing) == (0.5, 3.0, 0.1)


def test_accuracy_ignores_the_teacher_columns():
  logits = np.array([[2.0, 0.0, 1.0], [0.0, 3.0, 1.0]], np.float32)
  labels = np.eye(3, dtype=np.float32)[[0, 2]]
  # Teacher columns whose argmax disagrees with the labels must not count.
  soft = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]], np.float32)
  metric = distill.accuracy_metric()
  metric.update_state(np.concatenate([labels, soft], -1), logits)
  assert float(metric.result()) == 0.5 and metric.name == "accuracy"


def _tiny_classifier(num_classes, seed, input_shape=(4, 4, 3)):
  import keras
  keras.utils.set_random_seed(seed)
  inputs = keras.Input(input_shape)
  x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(5, 3)(inputs))
  return keras.Model(inputs, keras.layers.Dense(num_classes)(x))


def test_teacher_targets_are_the_mean_of_softened_predictions(tmp_path):
  import tensorflow as tf
  paths = []
  for seed in (1, 2):
    paths.append(str(tmp_path / f"t{seed}.keras"))
    _tiny_classifier(3, seed).save(paths[-1])
  teachers = distill.load_teachers(paths, 3, (4, 4, 3))
  images = np.random.default_rng(3).random((5, 4, 4, 3)).astype(np.float32)
  labels = np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1]]
  ds = tf.data.Dataset.from_tensors((images, labels)).map(
      distill.append_teacher_probabilities(teachers, temperature=4.0))
  _, targets = next(iter(ds))
  want = np.mean([_softmax(t.predict(images, verbose=0) / 4.0) for t in teachers], 0)
  np.testing.assert_array_equal(targets[:, :3], labels)
  np.testing.assert_allclose(targets[:, 3:], want, rtol=1e-5, atol=1e-6)


def test_teachers_that_do_not_fit_the_data_are_refused(tmp_path):
  path = str(tmp_path / "t.keras")
  _tiny_classifier(3, 0).save(path)
  with pytest.raises(ValueError, match="3 classes, the data has 10"):
    distill.load_teachers([path], 10, (4, 4, 3))
  with pytest.raises(ValueError, match="takes inputs"):
    distill.load_teachers([path], 3, (8, 8, 3))
  with pytest.raises(FileNotFoundError, match="absent.keras does not exist"):
    distill.load_teachers([str(tmp_path / "absent.keras")], 3, (4, 4, 3))


def test_config_checks_and_resume_equality():
  with pytest.raises(ValueError, match="distillation_weight"):
    TrainConfig(teachers=("t.keras",), distillation_weight=0.0)
  with pytest.raises(ValueError, match="distillation_temperature"):
    TrainConfig(teachers=("t.keras",), distillation_temperature=0.0)
  TrainConfig(distillation_weight=0.0)  # Ignored without teachers.
  import dataclasses, json
  config = TrainConfig(teachers=["a.keras", "b.keras"])
  assert config.teachers == ("a.keras", "b.keras")
  # A checkpoint stores the config as JSON (lists): it must still match.
  stored = json.loads(json.dumps(dataclasses.asdict(config)))
  assert recipe(stored) == recipe(dataclasses.asdict(config))
  assert recipe(stored) != recipe(dataclasses.asdict(TrainConfig(teachers=["a.keras"])))
