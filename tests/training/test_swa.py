"""Weight averaging: the running mean, BN re-estimation, the schedule, the config."""

import numpy as np
import pytest

from forge_tflm.training.swa import WeightAverage, recompute_batchnorm_statistics
from forge_tflm.training.train import TrainConfig, learning_rate_schedule


def test_weight_average_is_the_mean_and_survives_a_round_trip():
  rng = np.random.default_rng(0)
  snapshots = [[rng.normal(size=(3, 2)), rng.normal(size=4)] for _ in range(5)]
  average = WeightAverage()
  for i, weights in enumerate(snapshots):
    average.add(weights)
    back = WeightAverage.from_bytes(average.to_bytes())  # As a resumed run sees it.
    assert back.count == average.count == i + 1
    for a, b, *ws in zip(back.weights, average.weights, *snapshots[:i + 1]):
      np.testing.assert_array_equal(a, b)
      np.testing.assert_allclose(a, np.mean(ws, axis=0), rtol=1e-12, atol=1e-15)
  with pytest.raises(ValueError, match="shape"):
    average.add([np.zeros((2, 3)), np.zeros(4)])
  assert WeightAverage.from_bytes(WeightAverage().to_bytes()).weights is None


def test_batchnorm_statistics_become_the_mean_over_all_batches():
  import keras

  inputs = keras.Input((4, 4, 2))
  conv = keras.layers.Conv2D(3, 3, padding="same", use_bias=False, name="conv")
  outputs = keras.layers.BatchNormalization(momentum=0.9, name="bn")(conv(inputs))
  model = keras.Model(inputs, outputs)
  rng = np.random.default_rng(1)
  # Three batches from different distributions: a momentum-0.9 EMA would lean
  # towards the last one; the plain mean weighs them equally.
  batches = [rng.normal(loc, 1.0 + loc, size=(8, 4, 4, 2)).astype(np.float32)
             for loc in (0.0, 1.0, 3.0)]
  assert recompute_batchnorm_statistics(model, iter(batches)) == 3
  conv_out = [conv(b).numpy().reshape(-1, 3) for b in batches]
  bn = model.get_layer("bn")
  np.testing.assert_allclose(bn.moving_mean.numpy(),
                             np.mean([o.mean(0) for o in conv_out], axis=0), rtol=1e-5)
  np.testing.assert_allclose(bn.moving_variance.numpy(),
                             np.mean([o.var(0) for o in conv_out], axis=0), rtol=1e-4)
  assert bn.momentum == 0.9  # Restored: the saved model keeps its recipe.


def _rates(config, steps_per_epoch, steps):
  schedule = learning_rate_schedule(config, steps_per_epoch)
  return np.array([float(schedule(s)) for s in steps])


def test_schedule_decays_to_the_averaging_rate_and_holds_it():
  config = TrainConfig(epochs=10, warmup_epochs=0, learning_rate=0.1, swa_epochs=4,
                       swa_learning_rate=0.02)
  rates = _rates(config, 5, range(50))
  assert rates[0] == pytest.approx(0.1)
  assert np.all(np.diff(rates[:30]) < 0)  # Cosine over the first 6 epochs...
  np.testing.assert_allclose(rates[30:], 0.02, rtol=1e-6)  # ...then constant.

  pure = TrainConfig(epochs=3, warmup_epochs=0, swa_epochs=3, swa_learning_rate=0.01)
  np.testing.assert_allclose(_rates(pure, 5, range(15)), 0.01, rtol=1e-6)

  warm = TrainConfig(epochs=6, warmup_epochs=2, learning_rate=0.1, swa_epochs=2,
                     swa_learning_rate=0.05)
  rates = _rates(warm, 5, range(30))
  assert rates[0] == 0.0 and rates[10] == pytest.approx(0.1)
  np.testing.assert_allclose(rates[20:], 0.05, rtol=1e-6)


def test_schedule_without_averaging_is_the_plain_cosine_to_zero():
  config = TrainConfig(epochs=4, warmup_epochs=0, learning_rate=0.1)
  rates = _rates(config, 5, [0, 10, 20])
  np.testing.assert_allclose(rates, [0.1, 0.05, 0.0], atol=1e-7)


@pytest.mark.parametrize("kwargs, message", [
    (dict(epochs=3, swa_epochs=4), "swa_epochs"),
    (dict(epochs=3, swa_epochs=-1), "swa_epochs"),
    (dict(epochs=5, swa_epochs=2, swa_learning_rate=0.0), "swa_learning_rate"),
    (dict(epochs=5, warmup_epochs=3, swa_epochs=2), "warmup_epochs"),
])
def test_config_rejects_inconsistent_averaging(kwargs, message):
  with pytest.raises(ValueError, match=message):
    TrainConfig(**kwargs)
