"""benchmarks/gate_sweep.py prices the gate offline: it must agree with GatedForge."""

import numpy as np
import pytest

from forge_tflm.ops import RecalibOptions
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.evaluation.gate import SIGNALS, GateConfig, GatedForge
from forge_tflm.evaluation.protocol import ordering, run_stream
from forge_tflm.runtime.segmented import SegmentedModel
from tests.benchmarks import benchmark_script
from tests.converter import tiny_models


@pytest.fixture(scope="module")
def gate_sweep():
  with benchmark_script("gate_sweep") as module:
    yield module


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("sweep")
  tiny_models.convert_tiny(tmp, ConvertOptions(recalib=RecalibOptions(momentum=0.5)))
  data = (tmp / "tiny.tflite").read_bytes()
  model = SegmentedModel(data)
  # A shifted stream (darkened), so that adapting changes predictions.
  x = model.quantize_input(
      (tiny_models.random_images(48, size=16, seed=5) * 0.3).astype(np.float32) / 255.0)
  labels = np.random.default_rng(5).integers(0, 10, len(x))
  return data, x, labels


@pytest.mark.parametrize("signal", SIGNALS)
@pytest.mark.parametrize("warmup", [1, 3])
def test_priced_outcome_matches_the_gate(gate_sweep, stream, signal, warmup):
  data, x, labels = stream
  order = ordering(len(x), 0, 0)
  rows = gate_sweep.record_stream(SegmentedModel(data), SegmentedModel(data), x, labels,
                                  order, 8)
  for delta in (-1.0, 0.0, 1.0):  # Always, data-dependent, never.
    config = GateConfig(warmup, delta, signal, 0.5 if signal == "confidence_drop" else None)
    gated = GatedForge(SegmentedModel(data), config, batch_size=8)
    accuracy = run_stream(gated.predict, x, labels, order, 8)
    priced, fired = gate_sweep.gated_accuracy(rows, config)
    assert fired == gated.fired
    assert priced == pytest.approx(accuracy, abs=1e-12)
    np.testing.assert_allclose(rows[:warmup, 2:].sum(0), gated.probe.to_row(), rtol=1e-12)
