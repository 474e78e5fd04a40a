"""scale-adapt's host step: table lookup vs the elementwise definition, range EMA."""

import types

import numpy as np
import pytest

from forge_tflm.evaluation.int8_methods import ScaleAdaptKernel
from forge_tflm.ops import QuantParams, RecalibOptions
from forge_tflm.runtime.segmented import ADAPT, FROZEN


def _node(activation, momentum=0.3):
  return types.SimpleNamespace(
      quant=QuantParams(s_x=0.05, z_x=-10, s_y=0.03, z_y=-128 if activation != "none" else 3),
      options=RecalibOptions(momentum=momentum, window=None, activation=activation))


@pytest.mark.parametrize("activation", ["none", "relu", "relu6"])
def test_table_matches_elementwise_definition(activation):
  kernel = ScaleAdaptKernel(_node(activation))
  rng = np.random.default_rng(0)
  for step in range(6):
    # Shifted and rescaled batches, so the tracked range moves every step.
    x = np.clip(rng.normal(20 * step - 40, 10 + 8 * step, (4, 5, 5, 8)), -128, 127
                ).astype(np.int8)
    before = (kernel.low, kernel.high)
    y = kernel(x, ADAPT)
    np.testing.assert_array_equal(y, kernel.requantize(x))
    assert (kernel.low, kernel.high) != before
  frozen_range = (kernel.low, kernel.high)
  y = kernel(x, FROZEN)
  assert (kernel.low, kernel.high) == frozen_range
  np.testing.assert_array_equal(y, kernel.requantize(x))


def test_range_ema_follows_the_batch_extremes():
  node = _node("none", momentum=0.5)
  kernel = ScaleAdaptKernel(node)
  low0, high0 = kernel.low, kernel.high
  x = np.array([[-20, 30]], np.int8)
  kernel(x, ADAPT)
  q = node.quant
  assert kernel.low == pytest.approx(0.5 * low0 + 0.5 * min(q.s_x * (-20 - q.z_x), 0.0))
  assert kernel.high == pytest.approx(0.5 * high0 + 0.5 * q.s_x * (30 - q.z_x))
  kernel.reset()
  assert (kernel.low, kernel.high) == (low0, high0)


def test_window_momentum():
  opts = RecalibOptions(momentum=None, window=640)
  assert opts.momentum_at(64) == pytest.approx(0.1)
  assert opts.momentum_at(1000) == 1.0
