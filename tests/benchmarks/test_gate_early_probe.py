"""benchmarks/gate_early_probe.py prices the early "on" rule from first-probe records:
the price must be what GatedForge with that rule does."""

import numpy as np
import pytest

from forge_tflm.converter.options import ConvertOptions
from forge_tflm.evaluation.gate import GateConfig, GatedForge
from forge_tflm.evaluation.protocol import ordering, run_stream
from forge_tflm.ops import RecalibOptions
from forge_tflm.runtime.segmented import SegmentedModel
from tests.benchmarks import benchmark_script
from tests.converter import tiny_models

PROBE = 24


@pytest.fixture(scope="module")
def early_probe():
  with benchmark_script("gate_early_probe") as module:
    yield module


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("early")
  tiny_models.convert_tiny(tmp, ConvertOptions(recalib=RecalibOptions(momentum=0.5)))
  data = (tmp / "tiny.tflite").read_bytes()
  model = SegmentedModel(data)
  x = model.quantize_input(
      (tiny_models.random_images(PROBE, size=16, seed=7) * 0.1 + 150).astype(np.float32)
      / 255.0)  # Washed out: adapting changes some predictions.
  return data, x


def _adapted_labels(early_probe, data, x, order, config):
  """The adapting path's own predictions as labels: the paths then score differently
  wherever they disagree, so the priced gain is not trivially 0."""
  gated = early_probe._RecordingGate(SegmentedModel(data), config, batch_size=1)
  gated.last = {}
  labels = np.zeros(len(x), np.int64)
  for i in order:
    gated.predict(x[i:i + 1])
    labels[i] = gated.last["adapt"][0].argmax()
  return labels


def test_priced_early_rule_matches_the_gate(early_probe, stream):
  data, x = stream
  order = ordering(len(x), 0, 0)
  config = GateConfig(warmup_batches=PROBE, delta=-1.0)  # The whole probe says "on".
  labels = _adapted_labels(early_probe, data, x, order, config)
  fired, scores, vetoed, gain = early_probe.first_probe(SegmentedModel(data), config, x,
                                                       labels, order)
  assert fired and len(scores) == len(gain) == PROBE and not vetoed.any()
  assert gain[6:].sum() > 0 and gain.min() == 0  # The paths disagree after image 6.
  probe = early_probe.Probe("s", "shuffled", 0, fired, scores, vetoed, gain, PROBE)
  full = GatedForge(SegmentedModel(data), GateConfig(warmup_batches=PROBE, delta=-1.0,
                                                     early_images=0), batch_size=1)
  full_accuracy = run_stream(full.predict, x, labels, order, 1)
  m = 6
  priced_early = []
  for delta in (-1.0, float(np.median(scores[m - 1:-1])), 1e9):  # At m, later, never.
    gated = GatedForge(SegmentedModel(data), GateConfig(
        warmup_batches=PROBE, delta=-1.0, early_images=m, early_delta=delta), batch_size=1)
    accuracy = run_stream(gated.predict, x, labels, order, 1)
    flips, early, points = early_probe.price([probe], m, delta)
    # Decided early iff the adapting path predicted some of the probe's images.
    assert gated.decisions == [True] and flips == 0
    assert early == (gated.images_adapted > 0)
    assert points == pytest.approx(100.0 * (accuracy - full_accuracy), abs=1e-9)
    priced_early.append(gated.images_adapted)
  assert priced_early[0] == PROBE - m and priced_early[-1] == 0
  # A probe the whole of which said "off" and the rule turns on is a flip.
  off = early_probe.Probe("s", "sorted", 0, False, scores, vetoed, gain, PROBE)
  assert early_probe.price([off], m, -1.0) == (1, 0, 0.0)
  assert early_probe.price([off], m, 1e9) == (0, 0, 0.0)
