"""Gate logic with a scripted model: probe both paths, then keep or revert."""


import dataclasses

import numpy as np

import pytest

from forge_tflm.evaluation.gate import (CONFIDENCE_DROP, CONFIDENCE_GAIN, DIVERSITY_GAIN,
                                      SerialStats,
                                      SIGNALS, GateConfig, GatedForge, ProbeStats,
                                      clean_reference, entropy, for_model, top1_confidence)

GAIN = GateConfig(signal=CONFIDENCE_GAIN)


def confident(c):
  """Every image predicted as class 0 with top-1 confidence c (two classes)."""
  def logits(x):
    out = np.zeros((len(x), 2), np.float32)
    out[:, 0] = np.log(c / (1 - c))
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


class ScriptedModel:
  """Stands in for SegmentedModel: logits depend on mode; records calls.

  A float for a path means `confident(that)`.
  """

  def __init__(self, adapt_confidence, frozen_confidence=0.5):
    self.adapt = (confident(adapt_confidence) if isinstance(adapt_confidence, float)
                  else adapt_confidence)
    self.frozen = (confident(frozen_confidence) if isinstance(frozen_confidence, float)
                   else frozen_confidence)
    self.calls, self.resets = [], 0
    self.class_balanced = False
    self.observed = []  # Outputs passed to observe() (the guard's detector).

  def reset(self):
    self.resets += 1

  def get_state(self):
    return None

  def set_state(self, state):
    pass

  def run(self, x, mode):
    self.calls.append(mode)
    return (self.adapt if mode == "adapt" else self.frozen)(x)

  def dequantize_output(self, y):
    return y

  def observe(self, y):
    self.observed.append(y)


def _stream(gated, batches=6, batch_size=4):
  """Images alternating between the two classes (for `spread`), in batches."""
  x = (np.arange(batches * batch_size) % 2).astype(np.int8)[:, None]
  return [gated.predict(x[i:i + batch_size]) for i in range(0, len(x), batch_size)]


def test_confidence():
  np.testing.assert_allclose(top1_confidence(np.log([[0.2, 0.8]])), [0.8], rtol=1e-6)


def test_gate_fires_when_adapting_is_more_confident():
  model = ScriptedModel(adapt_confidence=0.9)
  gated = GatedForge(model, GateConfig(warmup_batches=2, delta=0.1, signal=CONFIDENCE_GAIN))
  assert model.resets == 1  # Construction starts a stream.
  _stream(gated, 4)
  assert gated.fired is True
  # Probe: source then adapt per batch; afterwards adapt only.
  assert model.calls == ["source", "adapt", "source", "adapt", "adapt", "adapt"]
  assert model.resets == 1  # The source pass leaves the adapted state alone.
  assert abs(gated.score - 0.4) < 1e-5


def test_gate_reverts_to_source_when_gain_is_below_delta():
  model = ScriptedModel(adapt_confidence=0.55)
  gated = GatedForge(model, GateConfig(warmup_batches=3, delta=0.1, signal=CONFIDENCE_GAIN))
  outs = _stream(gated, 5)
  assert gated.fired is False
  assert model.calls[-2:] == ["frozen", "frozen"]
  assert model.resets == 1 + 1  # The revert to the clean targets.
  # Probe predictions come from the frozen path.
  np.testing.assert_allclose(top1_confidence(outs[0]), 0.5, rtol=1e-5)


def test_reset_starts_a_new_decision():
  model = ScriptedModel(adapt_confidence=0.9)
  gated = GatedForge(model, GateConfig(warmup_batches=1, signal=CONFIDENCE_GAIN))
  _stream(gated, 2)
  assert gated.fired
  gated.reset()
  assert gated.fired is None and gated.batches_probed == 0 and np.isnan(gated.score)


def test_probe_compares_against_the_source_not_the_adapted_state(tmp_path):
  # On a real artifact: during the probe the gate's frozen logits are exactly
  # the source's and its adapted logits exactly ungated FORGE's, batch by batch.
  from forge_tflm.converter.options import ConvertOptions
  from forge_tflm.ops import RecalibOptions
  from forge_tflm.evaluation.int8_methods import Forge, Source
  from forge_tflm.runtime.segmented import SegmentedModel
  from tests.converter import tiny_models

  tiny_models.convert_tiny(tmp_path, ConvertOptions(recalib=RecalibOptions(momentum=0.5)))
  data = (tmp_path / "tiny.tflite").read_bytes()
  gated = GatedForge(SegmentedModel(data), GateConfig(warmup_batches=4, delta=0.0,
                                                      signal=CONFIDENCE_GAIN))
  source, forge = Source(SegmentedModel(data)), Forge(SegmentedModel(data))
  x = source.model.quantize_input(
      (tiny_models.random_images(32, size=16, seed=3) * 0.3).astype(np.float32) / 255.0)
  all_source, all_forge = [], []
  for i in range(4):
    batch = x[8 * i:8 * i + 8]
    got = gated.predict(batch)
    all_source.append(source.predict(batch))
    all_forge.append(forge.predict(batch))
    np.testing.assert_array_equal(got, all_source[-1])
    gain = (top1_confidence(np.concatenate(all_forge)).mean() -
            top1_confidence(np.concatenate(all_source)).mean())
    assert abs(gated.score - gain) < 1e-6
    if i < 3:  # Until the decision, the adapting path keeps its own state.
      for a, b in zip(gated.model.get_state(), forge.model.get_state()):
        np.testing.assert_array_equal(a, b)


def test_default_probe_covers_the_same_images_at_any_batch_size():
  assert GAIN.batches(64) == 20 and GAIN.batches(1) == 1280
  assert GAIN.batches(100) == 13  # Rounded up: at least 1280 images.
  assert GateConfig().batches(64) == 4 and GateConfig().batches(1) == 256
  assert GateConfig(warmup_batches=7).batches(1) == 7
  gated = GatedForge(ScriptedModel(adapt_confidence=0.9), GAIN, batch_size=1)
  _stream(gated, 1279, batch_size=1)
  assert gated.fired is None
  _stream(gated, 1, batch_size=1)
  assert gated.fired is True


def test_diversity_gate_fires_when_adapting_undoes_a_class_collapse():
  # The source piles every image onto class 0 (confidently); adapting spreads
  # them over both classes, less confidently: the confidence gain says no.
  for signal, want in ((DIVERSITY_GAIN, True), (CONFIDENCE_GAIN, False)):
    model = ScriptedModel(adapt_confidence=spread(0.6), frozen_confidence=0.9)
    gated = GatedForge(model, GateConfig(warmup_batches=2, signal=signal))
    _stream(gated, 3)
    assert gated.fired is want, signal
  want_gain = np.log(2) - entropy(np.array([0.9, 0.1]))
  assert abs(gated.probe.score(GateConfig()) - want_gain) < 1e-6


def test_diversity_gate_stays_off_when_both_paths_are_equally_diverse():
  # More confident, but no more diverse: the confidence gain would fire.
  model = ScriptedModel(adapt_confidence=spread(0.9), frozen_confidence=spread(0.6))
  gated = GatedForge(model, GateConfig(warmup_batches=2))
  _stream(gated, 3)
  assert gated.fired is False and abs(gated.score) < 1e-6
  assert model.calls[-1] == "frozen"


def test_probe_score_is_over_images_not_a_mean_of_per_batch_scores():
  # At batch 1 a batch's diversity is one image's entropy, which says nothing
  # about collapse; the probe pools its images, so batch 1 and batch 4 over the
  # same images give the same score.
  scores = []
  for batch_size, batches in ((1, 8), (4, 2)):
    model = ScriptedModel(adapt_confidence=spread(0.7), frozen_confidence=0.8)
    gated = GatedForge(model, GateConfig(warmup_batches=batches))
    _stream(gated, batches, batch_size=batch_size)
    scores.append(gated.score)
  want = np.log(2) - entropy(np.array([0.8, 0.2]))
  np.testing.assert_allclose(scores, [want, want], rtol=1e-6)


def test_probe_stats_add_up_and_round_trip():
  rng = np.random.default_rng(0)
  a, b = rng.normal(size=(5, 3)), rng.normal(size=(7, 3))
  a2, b2 = rng.normal(size=(5, 3)), rng.normal(size=(7, 3))
  pooled = ProbeStats.of_batch(np.concatenate([a, b]), np.concatenate([a2, b2]))
  summed = ProbeStats() + ProbeStats.of_batch(a, a2) + ProbeStats.of_batch(b, b2)
  back = ProbeStats.from_row(summed.to_row())
  for signal in SIGNALS:
    config = GateConfig(signal=signal, reference=0.9)
    assert abs(pooled.score(config) - summed.score(config)) < 1e-12
    assert abs(back.score(config) - summed.score(config)) < 1e-12
  assert back.images == 12 and np.isnan(ProbeStats().score(GateConfig()))


def test_drop_gate_fires_when_source_is_less_confident_than_on_clean_data():
  # Source confidence 0.5 against a clean reference of 0.9: a shifted stream.
  model = ScriptedModel(adapt_confidence=0.3)  # The adapting path's confidence is ignored.
  gated = GatedForge(model, GateConfig(warmup_batches=2, signal=CONFIDENCE_DROP,
                                       reference=0.9))
  _stream(gated, 3)
  assert gated.fired is True
  assert abs(gated.score - 0.4) < 1e-5
  assert model.calls == ["source", "adapt", "source", "adapt", "adapt"]


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
  assert GateConfig().signal == DIVERSITY_GAIN and GateConfig().margin == 0.03
  assert GAIN.margin == 0.0 and GateConfig(delta=-0.01).margin == -0.01
  assert GateConfig(signal=CONFIDENCE_DROP).needs_reference
  with pytest.raises(ValueError, match="needs the source's clean confidence"):
    GatedForge(ScriptedModel(0.9), GateConfig(signal=CONFIDENCE_DROP))
  with pytest.raises(ValueError, match="unknown gate signal"):
    GateConfig(signal="entropy")
  with pytest.raises(ValueError, match="in \\(0, 1\\]"):
    GateConfig(signal=CONFIDENCE_DROP, reference=1.5)


def test_clean_reference_is_the_sources_mean_confidence(tmp_path):
  from forge_tflm.converter.options import ConvertOptions
  from forge_tflm.ops import RecalibOptions
  from forge_tflm.evaluation.int8_methods import Source
  from forge_tflm.runtime.segmented import SegmentedModel
  from tests.converter import tiny_models

  tiny_models.convert_tiny(tmp_path, ConvertOptions(recalib=RecalibOptions(momentum=0.5)))
  data = (tmp_path / "tiny.tflite").read_bytes()
  source = Source(SegmentedModel(data))
  x = source.model.quantize_input(
      tiny_models.random_images(20, size=16, seed=4).astype(np.float32) / 255.0)
  want = top1_confidence(source.predict(x)).mean()
  model = SegmentedModel(data)
  model.run(x[:8])  # Adapted state must not leak into the reference.
  assert abs(clean_reference(model, x, batch_size=6) - want) < 1e-6


class PhasedModel(ScriptedModel):
  """The adapting path's confidence changes after `switch` adapt calls."""

  def __init__(self, before, after, switch):
    super().__init__(adapt_confidence=before)
    self.after, self.switch, self.adapt_calls = confident(after), switch, 0

  def run(self, x, mode):
    if mode == "adapt":
      self.adapt_calls += 1
      if self.adapt_calls > self.switch:
        self.adapt = self.after
    return super().run(x, mode)


def test_periodic_gate_decides_again_and_turns_off_when_adapting_stops_helping():
  # Batches of 4, a 1-batch probe every 8 images: probes at batches 0, 2, 4.
  model = PhasedModel(before=0.9, after=0.55, switch=2)
  gated = GatedForge(model, GateConfig(warmup_batches=1, delta=0.1, signal=CONFIDENCE_GAIN,
                                       period=8), batch_size=4)
  outs = _stream(gated, 6)
  assert gated.decisions == [True, False, False]
  assert gated.fired is False
  # Batch 2 is a re-probe while on: both paths run and the adapted one predicts.
  assert model.calls[3:5] == ["source", "adapt"]
  np.testing.assert_allclose(top1_confidence(outs[1]), 0.9, rtol=1e-5)
  np.testing.assert_allclose(top1_confidence(outs[2]), 0.55, rtol=1e-5)
  # Off after batch 2: batches 3 and 5 are source only, batch 4 a probe again.
  assert model.calls[5:] == ["frozen", "source", "adapt", "frozen"]
  assert gated.adapted_fraction == pytest.approx(2 / 6)  # Batches 1 and 2.


def test_periodic_gate_turns_on_when_a_later_probe_finds_a_gain():
  model = PhasedModel(before=0.55, after=0.9, switch=1)
  gated = GatedForge(model, GateConfig(warmup_batches=1, delta=0.1, signal=CONFIDENCE_GAIN,
                                       period=8), batch_size=4)
  _stream(gated, 4)
  assert gated.decisions == [False, True]
  assert model.calls[-1] == "adapt"


def test_without_period_the_gate_decides_once():
  model = PhasedModel(before=0.9, after=0.55, switch=2)
  gated = GatedForge(model, GateConfig(warmup_batches=1, delta=0.1, signal=CONFIDENCE_GAIN))
  _stream(gated, 6)
  assert gated.decisions == [True] and gated.fired


def test_gate_period_must_be_positive():
  with pytest.raises(ValueError, match="period"):
    GateConfig(period=0)


def _onehot_logits(classes, k=10, sharp=4.0):
  out = np.zeros((len(classes), k))
  out[np.arange(len(classes)), classes] = sharp
  return out


def test_serial_stats_separate_iid_from_label_correlated_predictions():
  rng = np.random.default_rng(0)
  iid = SerialStats()
  iid.add(_onehot_logits(rng.integers(0, 10, 256)))
  assert abs(iid.autocorrelation()) < 0.2
  runs = SerialStats()  # A class for 32 images at a time, as a fixed camera sees.
  runs.add(_onehot_logits(np.repeat(rng.permutation(10)[:8], 32)))
  assert runs.autocorrelation() > 0.9


def test_serial_stats_do_not_depend_on_the_batch_size():
  logits = _onehot_logits(np.random.default_rng(1).integers(0, 10, 64)) + \
      np.random.default_rng(2).normal(size=(64, 10))
  whole, one_by_one = SerialStats(), SerialStats()
  whole.add(logits)
  for row in logits:
    one_by_one.add(row[None])
  assert whole.pairs == one_by_one.pairs == 63
  assert one_by_one.autocorrelation() == pytest.approx(whole.autocorrelation(), rel=1e-12)


def test_serial_stats_of_identical_predictions_carry_no_evidence():
  collapsed = SerialStats()  # A collapsed source: every image the same soft vector.
  collapsed.add(np.tile([[3.0, 1.0, 0.0]], (100, 1)))
  assert collapsed.autocorrelation() == 0.0
  assert SerialStats().autocorrelation() == 0.0


def test_gate_stays_with_the_source_on_label_correlated_probes():
  def in_runs(x):  # Source predictions in runs of 4 equal classes: correlated.
    return _onehot_logits((np.arange(len(x)) // 4) % 2, k=3)  # And less diverse.
  def diverse(x):
    return _onehot_logits(np.arange(len(x)) % 3, k=3)
  for veto, fires in ((0.3, False), (None, True)):
    model = ScriptedModel(adapt_confidence=diverse, frozen_confidence=in_runs)
    gated = GatedForge(model, GateConfig(warmup_batches=1, max_autocorrelation=veto),
                       batch_size=24)
    gated.predict(np.zeros((24, 1), np.int8))
    assert gated.fired is fires
    assert gated.autocorrelation > 0.5
  with pytest.raises(ValueError, match="max_autocorrelation"):
    GateConfig(max_autocorrelation=float("nan"))


def test_a_class_balanced_gate_vetoes_only_where_adapting_conceals_the_correlation():
  # The class-balanced statistics are the label defence: while the adapting path's
  # predictions keep the runs the source shows, the defence is acting and the veto
  # would forfeit the streams it recovers. Where they do not (the guard never flagged
  # and the label-blind statistics normalized the runs away, which the score takes for
  # "adapting undoes a collapse"), the veto holds.
  def in_runs(x):  # Source: runs of 4 over two classes (correlated, less diverse).
    return _onehot_logits((np.arange(len(x)) // 4) % 2, k=3)
  def runs_of_three(x):  # Adapting path keeps the runs, over three classes.
    return _onehot_logits((np.arange(len(x)) // 4) % 3, k=3)
  def diverse(x):  # Adapting path with the runs normalized away.
    return _onehot_logits(np.arange(len(x)) % 3, k=3)
  config = GateConfig(warmup_batches=1, max_autocorrelation=0.3)
  for adapted, class_balanced, fires in ((runs_of_three, True, True),
                                         (diverse, True, False),
                                         (runs_of_three, False, False)):
    model = ScriptedModel(adapt_confidence=adapted, frozen_confidence=in_runs)
    model.class_balanced = class_balanced
    gated = GatedForge(model, config, batch_size=24)
    gated.predict(np.zeros((24, 1), np.int8))
    assert gated.fired is fires and gated.autocorrelation > 0.5
    assert gated.score > config.margin  # Only the veto keeps it off.
    assert gated.config.concealed_veto is class_balanced
    assert (gated.last_autocorrelation_adapted > 0.5) is (adapted is runs_of_three)
  assert for_model(config, True) == dataclasses.replace(config, concealed_veto=True,
                                                        keep_state=True)
  assert for_model(config, False) == dataclasses.replace(config, early_images=0)
  no_veto = for_model(GateConfig(max_autocorrelation=None), True)
  assert no_veto.max_autocorrelation is None
  model = ScriptedModel(adapt_confidence=diverse, frozen_confidence=in_runs)
  model.class_balanced = True
  gated = GatedForge(model, GateConfig(warmup_batches=1, max_autocorrelation=None), 24)
  gated.predict(np.zeros((24, 1), np.int8))
  assert gated.fired is True  # No veto configured: none, concealed or not.


def test_a_class_balanced_gate_off_after_an_inert_probe_feeds_the_source_to_the_detector():
  # Off with the state kept, the op runs in source mode. After a probe whose adapting
  # path changed nothing (|score| < inert_score: flagged, class statistics that never
  # move) its outputs feed the guard's detector (SPEC "Observe"), so a flag the source's
  # own collapse set can clear; after a probe that changed predictions, or on, or while
  # probing, nothing is observed.
  for adapt_confidence, inert_score, fires, observes in (
      (0.7, 1e-3, False, True), (0.7, 0.0, False, False), (0.6, 1e-3, False, False),
      (0.9, 1e-3, True, False)):
    model = ScriptedModel(adapt_confidence=adapt_confidence, frozen_confidence=0.7)
    model.class_balanced = True
    gated = GatedForge(model, GateConfig(warmup_batches=2, signal=CONFIDENCE_GAIN,
                                         period=64, inert_score=inert_score), batch_size=4)
    outs = _stream(gated, batches=6)
    assert gated.fired is fires and gated.config.keep_state
    assert model.resets == 1  # The one at construction: an off decision keeps the state.
    assert gated.observing is observes
    if not fires:
      assert model.calls[4:] == ["source"] * 4
    if observes:  # Batches 2-5 are predicted in source mode, each observed once.
      assert len(model.observed) == 4
      for y, out in zip(model.observed, outs[2:]):
        np.testing.assert_array_equal(y, out)
    else:
      assert model.observed == []
  with pytest.raises(ValueError, match="inert_score"):
    GateConfig(inert_score=-1.0)
  with pytest.raises(ValueError, match="inert_score"):
    GateConfig(inert_score=float("nan"))


def test_a_probe_far_above_the_margin_decides_on_early():
  # The source piles onto class 0, adapting spreads: score log 2 - H(0.9) = 0.37 nats.
  model = ScriptedModel(adapt_confidence=spread(0.6), frozen_confidence=0.9)
  gated = GatedForge(model, GateConfig(warmup_batches=20, early_images=8,
                                       early_delta=0.3), batch_size=4)
  outs = _stream(gated, 4)
  assert gated.decisions == [True] and not gated.probing
  # Probed batches 0 and 1 (8 images), then the adapting path alone predicts.
  assert model.calls == ["source", "adapt"] * 2 + ["adapt"] * 2
  np.testing.assert_allclose(top1_confidence(outs[0]), 0.9, rtol=1e-5)
  np.testing.assert_allclose(top1_confidence(outs[2]), 0.6, rtol=1e-5)
  assert gated.last_score == pytest.approx(np.log(2) - entropy(np.array([0.9, 0.1])))


def test_a_probe_below_the_early_margin_waits_for_its_end():
  for early_delta, early_images in ((0.5, 8), (0.3, 0)):  # Score 0.37; 0: never early.
    model = ScriptedModel(adapt_confidence=spread(0.6), frozen_confidence=0.9)
    gated = GatedForge(model, GateConfig(warmup_batches=5, early_images=early_images,
                                         early_delta=early_delta), batch_size=4)
    _stream(gated, 4)
    assert gated.probing and gated.decisions == []
    _stream(gated, 1)
    assert gated.decisions == [True]


def test_off_is_never_decided_early_and_the_veto_holds_early():
  model = ScriptedModel(adapt_confidence=spread(0.9), frozen_confidence=spread(0.6))
  gated = GatedForge(model, GateConfig(warmup_batches=5, early_images=4), batch_size=4)
  _stream(gated, 4)
  assert gated.probing and gated.decisions == []
  def in_runs(x):  # Label-correlated and collapsed: the veto says no, however early.
    return _onehot_logits((np.arange(len(x)) // 4) % 2, k=3)
  def diverse(x):
    return _onehot_logits(np.arange(len(x)) % 3, k=3)
  for veto, class_balanced, probing in ((0.3, False, True), (1e9, False, False),
                                        (None, True, True)):
    model = ScriptedModel(adapt_confidence=diverse, frozen_confidence=in_runs)
    model.class_balanced = class_balanced
    gated = GatedForge(model, GateConfig(warmup_batches=3, early_images=8,
                                         max_autocorrelation=veto), batch_size=24)
    gated.predict(np.zeros((24, 1), np.int8))
    # Without a veto (None) the early "on" keeps the default one, and a class-balanced
    # gate's is unconditional: a label-correlated probe waits for its end.
    assert gated.probing is probing and gated.autocorrelation > 0.5
    assert gated.config.early_max_autocorrelation == (0.1 if veto is None else veto)


def test_early_decision_defaults_and_errors():
  assert GateConfig().early_after(1) == 128 and GateConfig().early_margin == 0.1
  assert GateConfig().early_after(64) == 0  # The default is batch 1's (the device's).
  assert GateConfig(early_images=128).early_after(64) == 128
  assert GAIN.early_after(1) == 0 and GateConfig(signal=CONFIDENCE_DROP).early_after(1) == 0
  assert GateConfig(delta=0.2).early_margin == 0.2  # Never below the probe's margin.
  assert GateConfig(early_images=0).early_after(1) == 0
  # Label-blind models decide early only when asked to; class-balanced ones by default.
  assert for_model(GateConfig(), False).early_after(1) == 0
  assert for_model(GateConfig(early_images=64), False).early_after(1) == 64
  assert for_model(GateConfig(), True).early_after(1) == 128
  with pytest.raises(ValueError, match="early_images must be >= 0"):
    GateConfig(early_images=-1)
  with pytest.raises(ValueError, match="early_delta must be a finite"):
    GateConfig(early_delta=float("nan"))
  with pytest.raises(ValueError, match=r"early_delta \(0.01\) must be >= the probe's"):
    GateConfig(early_delta=0.01)
