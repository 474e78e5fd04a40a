"""The gate in the evaluator: the field controller's C code (forge_controller.c) driven
batch by batch, with a scripted model. The scores are checked against numpy written
here from the definitions (forge_controller.h), not against a second implementation."""

import dataclasses

import numpy as np
import pytest

from forge_tflm.evaluation import gate
from forge_tflm.evaluation.gate import (SETTINGS, GateConfig, GatedForge,
                                        device_defines, host_arguments, settings)

SCALE = 1 / 16  # The scripted model's int8 output scale (zero point 0).


def quantize(logits):
  return np.clip(np.round(np.asarray(logits) / SCALE), -128, 127).astype(np.int8)


def probs(y):
  z = y.astype(np.float32).astype(np.float64) * SCALE
  z = np.exp(z - z.max(axis=1, keepdims=True))
  return z / z.sum(axis=1, keepdims=True)


def diversity_gain(source, adapted):
  """H(mean p_adapted) - H(mean p_source) over int8 outputs [N, K]."""
  def h(p):
    p = p.mean(axis=0)
    return -(p[p > 0] * np.log(p[p > 0])).sum()
  return h(probs(adapted)) - h(probs(source))


def confident(c, k=2):
  """Every image predicted as class 0 with top-1 confidence about c."""
  def logits(x):
    out = np.zeros((len(x), k))
    out[:, 0] = np.log(c * (k - 1) / (1 - c))
    return out
  return logits


def spread(c):
  """Image i predicted as class x[i, 0] % 2 with confidence c: balanced classes."""
  def logits(x):
    out = confident(c)(x)
    flip = x[:, 0] % 2 == 1
    out[flip] = out[flip][:, ::-1]
    return out
  return logits


def onehot(classes, k=3, sharp=4.0):
  out = np.zeros((len(classes), k))
  out[np.arange(len(classes)), classes] = sharp
  return out


def in_runs(x):  # Runs of 4 images over two classes: label-correlated, less diverse.
  return onehot((np.arange(len(x)) // 4) % 2)


def runs_of_three(x):  # The runs kept, over three classes.
  return onehot((np.arange(len(x)) // 4) % 3)


def diverse(x):  # No runs, three classes.
  return onehot(np.arange(len(x)) % 3)


class ScriptedModel:
  """Stands in for SegmentedModel: int8 outputs depend on the mode; records calls."""

  def __init__(self, adapt, source=confident(0.5), classes=2):
    self.adapt = confident(adapt) if isinstance(adapt, float) else adapt
    self.source = source
    self.calls, self.resets = [], 0
    self.output_quant, self.output_shape = (SCALE, 0), (classes,)

  def reset(self):
    self.resets += 1

  def run(self, x, mode):
    self.calls.append(mode)
    return quantize((self.adapt if mode == "adapt" else self.source)(x))

  def dequantize_output(self, y):
    return y.astype(np.float32) * SCALE


class PhasedModel(ScriptedModel):
  """The adapting path changes after `switch` adapt calls."""

  def __init__(self, before, after, switch):
    super().__init__(adapt=before)
    self.after, self.switch, self.adapt_calls = after, switch, 0

  def run(self, x, mode):
    if mode == "adapt":
      self.adapt_calls += 1
      if self.adapt_calls > self.switch:
        self.adapt = self.after
    return super().run(x, mode)


def _stream(gated, batches=6, batch_size=4):
  """Images alternating between the two classes (for `spread`), in batches."""
  x = (np.arange(batches * batch_size) % 2).astype(np.int8)[:, None]
  return [gated.predict(x[i:i + batch_size]) for i in range(0, len(x), batch_size)]


def test_adapting_that_undoes_a_class_collapse_turns_the_gate_on():
  model = ScriptedModel(adapt=spread(0.6), source=confident(0.9))
  gated = GatedForge(model, GateConfig(probe_images=8))
  assert model.resets == 1  # Construction starts a stream.
  outs = _stream(gated, 4)
  assert gated.fired is True and gated.decisions == [True]
  # Probe: source then adapt per batch, the source predicting; then adapt only.
  assert model.calls == ["source", "adapt"] * 2 + ["adapt"] * 2
  np.testing.assert_array_equal(outs[0], model.dequantize_output(model.run(
      np.zeros((4, 1), np.int8), "source")))
  x = (np.arange(8) % 2).astype(np.int8)[:, None]
  want = diversity_gain(quantize(confident(0.9)(x)), quantize(spread(0.6)(x)))
  assert gated.last_score == pytest.approx(want, rel=1e-12) and want > 0.3


def test_equally_diverse_paths_turn_it_off_and_reset_a_label_blind_model():
  # More confident, no more diverse: off; the label-blind model goes back to its targets.
  model = ScriptedModel(adapt=spread(0.9), source=spread(0.6))
  gated = GatedForge(model, GateConfig(probe_images=8))
  _stream(gated, 4)
  assert gated.fired is False and abs(gated.last_score) < 1e-6
  assert model.calls[-2:] == ["frozen", "frozen"] and model.resets == 2
  assert gated.adapted_fraction == 0.0


def test_reset_starts_a_new_decision():
  gated = GatedForge(ScriptedModel(adapt=spread(0.6), source=confident(0.9)),
                     GateConfig(probe_images=4))
  _stream(gated, 2)
  assert gated.fired
  gated.reset()
  assert gated.fired is None and gated.probing and gated.decisions == []


def test_the_probe_ends_at_the_first_batch_that_completes_it():
  # 256 images by default: 4 batches of 64, 3 batches of 100, 256 of 1. The source
  # predicts one class throughout, a run the detector would flag: it is off here.
  for batch_size, batches in ((64, 4), (100, 3), (1, 256)):
    gated = GatedForge(ScriptedModel(adapt=spread(0.6), source=confident(0.9)),
                       GateConfig(label_window=0))
    _stream(gated, batches - 1, batch_size)
    assert gated.decisions == [], batch_size
    _stream(gated, 1, batch_size)
    assert gated.decisions == [True], batch_size


def test_the_score_pools_images_whatever_the_batch_size():
  scores = []
  for batch_size, batches in ((1, 8), (4, 2), (8, 1)):
    gated = GatedForge(ScriptedModel(adapt=spread(0.7), source=confident(0.8)),
                       GateConfig(probe_images=8))
    _stream(gated, batches, batch_size)
    scores.append(gated.last_score)
  assert scores[0] == pytest.approx(scores[1], rel=1e-12) == pytest.approx(scores[2])


def test_a_periodic_gate_decides_again_and_turns_off_when_adapting_stops_helping():
  # Batches of 4, a 4-image probe every 8 images: probes at batches 0, 2, 4.
  model = PhasedModel(before=spread(0.6), after=confident(0.9), switch=2)
  model.source = confident(0.9)
  gated = GatedForge(model, GateConfig(probe_images=4, period=8))
  outs = _stream(gated, 6)
  assert gated.decisions == [True, False, False] and gated.fired is False
  # Batch 2 re-probes while on: both paths run and the adapted one predicts.
  assert model.calls[3:5] == ["source", "adapt"]
  assert outs[1].argmax(1).tolist() == [0, 1, 0, 1]
  # Off after batch 2: batches 3 and 5 frozen, batch 4 a probe again.
  assert model.calls[5:] == ["frozen", "source", "adapt", "frozen"]
  assert gated.adapted_fraction == pytest.approx(2 / 6)
  assert gated.probed_fraction == pytest.approx(3 / 6)  # Batches 0, 2 and 4.


def test_a_periodic_gate_turns_on_when_a_later_probe_finds_a_gain():
  model = PhasedModel(before=confident(0.9), after=spread(0.6), switch=1)
  model.source = confident(0.9)
  gated = GatedForge(model, GateConfig(probe_images=4, period=8))
  _stream(gated, 4)
  assert gated.decisions == [False, True] and model.calls[-1] == "adapt"


def test_without_a_period_the_gate_decides_once():
  model = PhasedModel(before=spread(0.6), after=confident(0.9), switch=2)
  model.source = confident(0.9)
  gated = GatedForge(model, GateConfig(probe_images=4))
  _stream(gated, 6)
  assert gated.decisions == [True] and gated.fired


def detector(labels, k, window):
  """numpy of the detector's definition (forge_controller.h): (agreement, chance)."""
  h, a, prev = np.full(k, 1.0 / k), 1.0 / k, -1
  rate, agree = 1.0 / window, min(1.0, 32.0 / window)
  for label in labels:
    h *= 1.0 - rate
    h[label] += rate
    if prev >= 0:
      a += agree * (float(label == prev) - a)
    prev = label
  return a, float(h @ h)


def test_the_detector_flags_runs_of_a_class_and_not_iid_labels():
  rng = np.random.default_rng(0)
  cases = {"iid": rng.integers(0, 10, 512), "runs": np.repeat(rng.permutation(10), 64)[:512]}
  for name, labels in cases.items():
    y = quantize(onehot(labels, k=10))
    c = gate.Controller({"probe_images": 10**6, "label_window": 1024}, 10, SCALE, 0)
    for i in range(0, len(y), 8):  # batches of 8; the labels enter image by image
      c.probed(y[i:i + 8], y[i:i + 8], 8)
    a, e = detector(labels, 10, 1024)
    assert c.agreement == pytest.approx(a, rel=1e-12)
    assert c.chance == pytest.approx(e, rel=1e-12)
    assert c.correlated is (name == "runs") is (a > 1.75 * e)


def in_long_runs(x):  # Runs of 16 images over three classes: label-correlated.
  return onehot((np.arange(len(x)) // 16) % 3)


class SafeModel(ScriptedModel):
  """Runs mode adapt_safe as `safe` (only the label-safe ops adapt)."""

  def __init__(self, adapt, source, safe, classes=3):
    super().__init__(adapt=adapt, source=source, classes=classes)
    self.safe = safe

  def run(self, x, mode):
    if mode == "adapt_safe":
      self.calls.append(mode)
      return quantize(self.safe(x))
    return super().run(x, mode)


class LabelledModel(ScriptedModel):
  """Each image says what every path predicts: columns source, adapt, adapt_safe."""

  def __init__(self):
    super().__init__(adapt=diverse, classes=3)

  def run(self, x, mode):
    self.calls.append(mode)
    column = {"source": 0, "adapt": 1, "adapt_safe": 2}.get(mode, 0)
    return quantize(onehot(x[:, column]))


def _feed(gated, labels, batch_size=16):
  for i in range(0, len(labels), batch_size):
    gated.predict(labels[i:i + batch_size].astype(np.int8))


def test_while_labels_look_correlated_only_the_label_safe_ops_adapt():
  """A probe over runs of one class adapts in the op's adapt_safe mode and scores that
  path alone: its count starts again when the detector switches the path. Once on, the
  gate keeps adapting in that mode while the detector flags."""
  i = np.arange(256)
  model = LabelledModel()  # The source in runs over two classes, adapt_safe over three.
  gated = GatedForge(model, GateConfig(probe_images=48, label_window=256))
  _feed(gated, np.stack([(i // 16) % 2, i % 3, (i // 16) % 3], axis=1))
  assert gated.correlated and gated.decisions == [True]
  # The first batch, before the detector has seen a run, adapts every op; then 48
  # images (3 batches) of adapt_safe beside the source decide, on that path's score.
  assert model.calls[:8] == ["source", "adapt"] + ["source", "adapt_safe"] * 3
  assert model.calls[8:] == ["adapt_safe"] * 12
  j = np.arange(16, 64)
  want = diversity_gain(quantize(onehot((j // 16) % 2)), quantize(onehot((j // 16) % 3)))
  assert gated.last_score == pytest.approx(want, rel=1e-6) and want > 0.3


def test_off_holds_until_the_next_probe_which_measures_the_path_of_its_time():
  # A run of one class: adapt_safe, no more diverse than the source, is off (a
  # label-blind model resets). Then i.i.d. labels: the detector clears, the gate stays
  # off (frozen) until the period's next probe, which measures adapting every op, more
  # diverse than the source (two classes of three): on.
  rng = np.random.default_rng(0)
  run = np.zeros((128, 3), np.int64)
  iid = np.stack([rng.integers(0, 2, 256), rng.integers(0, 3, 256),
                  rng.integers(0, 3, 256)], axis=1)
  model = LabelledModel()
  gated = GatedForge(model, GateConfig(probe_images=32, label_window=512, period=256))
  _feed(gated, run)
  assert gated.decisions == [False] and gated.correlated and model.resets == 2
  assert gated.last_score == pytest.approx(0.0, abs=1e-9)
  assert model.calls[-1] == "frozen" and model.calls.count("adapt_safe") == 2
  model.calls.clear()
  _feed(gated, iid)
  assert gated.decisions == [False, True] and not gated.correlated
  # The first probe began at image 0 and the next at 256: images 128-255 frozen.
  assert model.calls[:8] == ["frozen"] * 8
  assert model.calls[8:12] == ["source", "adapt"] * 2
  assert set(model.calls[12:]) == {"adapt"}


def test_iid_labels_adapt_every_op():
  model = SafeModel(adapt=diverse, source=lambda x: onehot(np.arange(len(x)) % 2),
                    safe=diverse)
  gated = GatedForge(model, GateConfig(probe_images=16, label_window=256))
  for _ in range(3):
    gated.predict(np.arange(16, dtype=np.int8)[:, None])
  assert gated.decisions == [True] and model.calls == ["source", "adapt", "adapt", "adapt"]


def test_label_window_zero_turns_the_detector_off():
  model = SafeModel(adapt=diverse, source=in_long_runs, safe=runs_of_three)
  gated = GatedForge(model, GateConfig(probe_images=48, label_window=0))
  for _ in range(5):
    gated.predict(np.zeros((16, 1), np.int8))
  assert not gated.correlated and "adapt_safe" not in model.calls


def test_four_settings_face_the_user():
  """Issue 36: at most four field settings."""
  assert [s.name for s in SETTINGS] == ["probe_images", "period", "delta", "label_window"]
  assert settings(GateConfig(delta=0.2)) == {"probe_images": 256, "period": 0,
                                             "delta": 0.2, "label_window": 4096}


@pytest.mark.parametrize("bad, message", [
    (dict(period=0), "period must be >= 1"), (dict(probe_images=0), "probe_images"),
    (dict(delta=float("nan")), "delta must be a finite"),
    (dict(label_window=-1), "label_window must be a whole number >= 0")])
def test_bad_settings_are_refused(bad, message):
  with pytest.raises(ValueError, match=message):
    GateConfig(**bad)


def test_the_controller_refuses_what_python_would_not_catch():
  with pytest.raises(ValueError, match="unknown gate setting"):
    gate.Controller({"probe": 4}, 10, SCALE, 0)
  with pytest.raises(ValueError, match="probe_images is out of range"):
    gate.Controller({"probe_images": 0}, 10, SCALE, 0)
  with pytest.raises(ValueError, match=f"1 to {gate.MAX_CLASSES} classes"):
    gate.Controller({}, gate.MAX_CLASSES + 1, SCALE, 0)
  with pytest.raises(ValueError, match="needs 6 int8 outputs"):
    gate.Controller({}, 3, SCALE, 0).probed(np.zeros(3, np.int8), np.zeros(3, np.int8), 2)


def test_every_setting_reaches_the_device_and_the_host_app_once():
  config = GateConfig(probe_images=16, period=40, delta=0.05)
  defines = device_defines(config)
  args = host_arguments(config)
  assert len(defines) == len(args) == len(SETTINGS)
  assert defines["FORGE_APP_GATE_PROBE_IMAGES"] == "16" and "--gate_probe_images=16" in args
  assert defines["FORGE_APP_GATE_LABEL_WINDOW"] == "4096"
  assert "--gate_label_window=4096" in args
  assert defines["FORGE_APP_GATE_DELTA"] == "0.05" and "--gate_delta=0.05" in args
  assert dataclasses.replace(config, period=None).period is None


def test_softmax_outputs_are_read_as_probabilities():
  """A model ending in int8 SOFTMAX (scale 1/256, zero point -128: MLPerf Tiny's
  ResNet-8) hands the controller probabilities; softmaxing them again flattened every
  image towards uniform and its gate never turned on (measured, issue 35)."""
  k, n = 10, 8
  collapsed = np.full((n, k), -128, np.int8)
  collapsed[:, 0] = 127  # Every image: class 0 with p = 255/256.
  balanced = np.full((n, k), -128, np.int8)
  balanced[np.arange(n), np.arange(n) % k] = 127
  c = gate.Controller(settings(GateConfig(probe_images=n)), k, 1 / 256, -128)
  c.probed(collapsed, balanced, n)
  p = lambda q: (q.astype(np.float64) + 128) / 256  # noqa: E731

  def h(q):
    m = (p(q) / p(q).sum(1, keepdims=True)).mean(0)
    return -(m[m > 0] * np.log(m[m > 0])).sum()
  assert c.score == pytest.approx(h(balanced) - h(collapsed), rel=1e-9)
  assert c.score > 1.5 and c.adapting
