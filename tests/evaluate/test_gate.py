"""Gate logic with a scripted model: probe both paths, then keep or revert."""

import numpy as np

from forge_tflm.evaluate.gate import GateConfig, GatedForge, top1_confidence


class ScriptedModel:
  """Stands in for SegmentedModel: logits depend on mode; records calls."""

  def __init__(self, adapt_confidence, frozen_confidence=0.5):
    self.adapt_confidence = adapt_confidence
    self.frozen_confidence = frozen_confidence
    self.calls, self.resets = [], 0

  def reset(self):
    self.resets += 1

  def run(self, x, mode):
    self.calls.append(mode)
    c = self.adapt_confidence if mode == "adapt" else self.frozen_confidence
    logits = np.zeros((len(x), 2), np.float32)
    logits[:, 0] = np.log(c / (1 - c))  # softmax top-1 = c
    return logits

  def dequantize_output(self, y):
    return y


def _stream(gated, batches=6):
  return [gated.predict(np.zeros((4, 1), np.int8)) for _ in range(batches)]


def test_confidence():
  np.testing.assert_allclose(top1_confidence(np.log([[0.2, 0.8]])), [0.8], rtol=1e-6)


def test_gate_fires_when_adapting_is_more_confident():
  model = ScriptedModel(adapt_confidence=0.9)
  gated = GatedForge(model, GateConfig(warmup_batches=2, delta=0.1))
  assert model.resets == 1  # Construction starts a stream.
  _stream(gated, 4)
  assert gated.fired is True
  # Probe: frozen then adapt per batch; afterwards adapt only.
  assert model.calls == ["frozen", "adapt", "frozen", "adapt", "adapt", "adapt"]
  assert model.resets == 1
  assert abs(gated.mean_gain - 0.4) < 1e-5


def test_gate_reverts_to_source_when_gain_is_below_delta():
  model = ScriptedModel(adapt_confidence=0.55)
  gated = GatedForge(model, GateConfig(warmup_batches=3, delta=0.1))
  outs = _stream(gated, 5)
  assert gated.fired is False
  assert model.calls[-2:] == ["frozen", "frozen"]
  assert model.resets == 2  # State restored to the clean targets when reverting.
  # Probe predictions come from the frozen path.
  np.testing.assert_allclose(top1_confidence(outs[0]), 0.5, rtol=1e-5)


def test_reset_starts_a_new_decision():
  model = ScriptedModel(adapt_confidence=0.9)
  gated = GatedForge(model, GateConfig(warmup_batches=1))
  _stream(gated, 2)
  assert gated.fired
  gated.reset()
  assert gated.fired is None and gated.gains == []
