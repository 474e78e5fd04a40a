"""Gate logic with a scripted model: probe both paths, then keep or revert."""


import numpy as np

import pytest

from forge_tflm.evaluate.gate import (CONFIDENCE_DROP, GateConfig, GatedForge,
                                      clean_reference, top1_confidence)


class ScriptedModel:
  """Stands in for SegmentedModel: logits depend on mode; records calls."""

  def __init__(self, adapt_confidence, frozen_confidence=0.5):
    self.adapt_confidence = adapt_confidence
    self.frozen_confidence = frozen_confidence
    self.calls, self.resets = [], 0

  def reset(self):
    self.resets += 1

  def get_state(self):
    return None

  def set_state(self, state):
    pass

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
  assert model.resets == 1 + 2  # One source pass per probe batch.
  assert abs(gated.mean_score - 0.4) < 1e-5


def test_gate_reverts_to_source_when_gain_is_below_delta():
  model = ScriptedModel(adapt_confidence=0.55)
  gated = GatedForge(model, GateConfig(warmup_batches=3, delta=0.1))
  outs = _stream(gated, 5)
  assert gated.fired is False
  assert model.calls[-2:] == ["frozen", "frozen"]
  assert model.resets == 1 + 3 + 1  # Probe passes, then the revert to clean targets.
  # Probe predictions come from the frozen path.
  np.testing.assert_allclose(top1_confidence(outs[0]), 0.5, rtol=1e-5)


def test_reset_starts_a_new_decision():
  model = ScriptedModel(adapt_confidence=0.9)
  gated = GatedForge(model, GateConfig(warmup_batches=1))
  _stream(gated, 2)
  assert gated.fired
  gated.reset()
  assert gated.fired is None and gated.scores == []


def test_probe_compares_against_the_source_not_the_adapted_state(tmp_path):
  # On a real artifact: during the probe the gate's frozen logits are exactly
  # the source's and its adapted logits exactly ungated FORGE's, batch by batch.
  from forge_tflm.converter.options import ConvertOptions
  from forge_tflm.evaluate.int8_methods import Forge, Source
  from forge_tflm.runtime.segmented import SegmentedModel
  from tests.converter import tiny_models

  tiny_models.convert_tiny(tmp_path, ConvertOptions(momentum=0.5, window=None))
  data = (tmp_path / "tiny.tflite").read_bytes()
  gated = GatedForge(SegmentedModel(data), GateConfig(warmup_batches=4, delta=0.0))
  source, forge = Source(SegmentedModel(data)), Forge(SegmentedModel(data))
  x = source.model.quantize_input(
      (tiny_models.random_images(32, size=16, seed=3) * 0.3).astype(np.float32) / 255.0)
  for i in range(4):
    batch = x[8 * i:8 * i + 8]
    got = gated.predict(batch)
    want_source = source.predict(batch)
    want_forge = forge.predict(batch)
    np.testing.assert_array_equal(got, want_source)
    gain = top1_confidence(want_forge).mean() - top1_confidence(want_source).mean()
    assert abs(gated.scores[i] - gain) < 1e-6
    if i < 3:  # Until the decision, the adapting path keeps its own state.
      for a, b in zip(gated.model.get_state(), forge.model.get_state()):
        np.testing.assert_array_equal(a, b)


def test_default_probe_covers_the_same_images_at_any_batch_size():
  config = GateConfig()
  assert config.batches(64) == 20 and config.batches(1) == 1280
  assert config.batches(100) == 13  # Rounded up: at least 1280 images.
  assert GateConfig(warmup_batches=7).batches(1) == 7
  gated = GatedForge(ScriptedModel(adapt_confidence=0.9), config, batch_size=1)
  _stream(gated, 1279)
  assert gated.fired is None
  _stream(gated, 1)
  assert gated.fired is True


def test_drop_gate_fires_when_source_is_less_confident_than_on_clean_data():
  # Source confidence 0.5 against a clean reference of 0.9: a shifted stream.
  model = ScriptedModel(adapt_confidence=0.3)  # The adapting path's confidence is ignored.
  gated = GatedForge(model, GateConfig(warmup_batches=2, signal=CONFIDENCE_DROP,
                                       reference=0.9))
  _stream(gated, 3)
  assert gated.fired is True
  assert abs(gated.mean_score - 0.4) < 1e-5
  assert model.calls == ["frozen", "adapt", "frozen", "adapt", "adapt"]


def test_drop_gate_stays_off_near_the_clean_reference():
  model = ScriptedModel(adapt_confidence=0.9)  # Would fire the gain gate.
  gated = GatedForge(model, GateConfig(warmup_batches=2, signal=CONFIDENCE_DROP,
                                       reference=0.52))
  _stream(gated, 3)
  assert gated.fired is False  # 0.02 < the default margin 0.05.
  assert model.calls[-1] == "frozen"


def test_gate_config_defaults_and_errors():
  drop = GateConfig(signal=CONFIDENCE_DROP, reference=0.9)
  assert drop.batches(64) == 10 and drop.batches(1) == 640 and drop.margin == 0.05
  assert GateConfig().margin == 0.0 and GateConfig(delta=-0.01).margin == -0.01
  assert GateConfig(signal=CONFIDENCE_DROP).needs_reference
  with pytest.raises(ValueError, match="needs the source's clean confidence"):
    GatedForge(ScriptedModel(0.9), GateConfig(signal=CONFIDENCE_DROP))
  with pytest.raises(ValueError, match="unknown gate signal"):
    GateConfig(signal="entropy")
  with pytest.raises(ValueError, match="in \\(0, 1\\]"):
    GateConfig(signal=CONFIDENCE_DROP, reference=1.5)


def test_clean_reference_is_the_sources_mean_confidence(tmp_path):
  from forge_tflm.converter.options import ConvertOptions
  from forge_tflm.evaluate.int8_methods import Source
  from forge_tflm.runtime.segmented import SegmentedModel
  from tests.converter import tiny_models

  tiny_models.convert_tiny(tmp_path, ConvertOptions(momentum=0.5, window=None))
  data = (tmp_path / "tiny.tflite").read_bytes()
  source = Source(SegmentedModel(data))
  x = source.model.quantize_input(
      tiny_models.random_images(20, size=16, seed=4).astype(np.float32) / 255.0)
  want = top1_confidence(source.predict(x)).mean()
  model = SegmentedModel(data)
  model.run(x[:8])  # Adapted state must not leak into the reference.
  assert abs(clean_reference(model, x, batch_size=6) - want) < 1e-6
