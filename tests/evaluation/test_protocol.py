"""Evaluation protocol on the tiny converted model: orderings, resets, reports."""

import json

import numpy as np
import pytest

from forge_tflm.ops import RecalibOptions
from forge_tflm.artifact import InputContract
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.evaluation import report
from forge_tflm.evaluation.protocol import EvalConfig, Stream, evaluate, ordering
from forge_tflm.evaluation.run import run_evaluation
from forge_tflm.testing import tiny_models


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
  d = tmp_path_factory.mktemp("eval")
  src, _ = tiny_models.convert_tiny(d, ConvertOptions(recalib=RecalibOptions(momentum=0.2)))
  return src, str(d / "tiny.tflite")


def _streams(n=48):
  rng = np.random.default_rng(0)
  images = tiny_models.random_images(n, seed=5)
  labels = rng.integers(0, 10, n)
  dark = (images * 0.3).astype(np.uint8)  # A strong, simple shift.
  return [Stream("clean", images, labels), Stream("dark", dark, labels)]


def test_orderings_are_permutations_shared_by_methods():
  a, b = ordering(100, 0, 0), ordering(100, 1, 0)
  assert sorted(a) == list(range(100)) and not np.array_equal(a, b)
  np.testing.assert_array_equal(a, ordering(100, 0, 0))


def test_state_is_reset_between_streams_and_orderings(artifact):
  _, path = artifact
  with open(path, "rb") as f:
    data = f.read()
  cfg = EvalConfig(methods=("source", "forge"), batch_size=8, orderings=2,
                   kernels="reference")
  streams = _streams()
  raw = evaluate(cfg, streams, artifact=data, float_model=None, contract=InputContract())
  # Running the second stream alone gives the same numbers: nothing leaks across streams.
  alone = evaluate(cfg, streams[1:], artifact=data, float_model=None,
                   contract=InputContract())
  assert raw["accuracy"]["forge"]["dark"] == alone["accuracy"]["forge"]["dark"]
  assert raw["accuracy"]["source"]["dark"] == alone["accuracy"]["source"]["dark"]
  assert len(raw["accuracy"]["source"]["dark"]) == 2


def test_non_adaptive_methods_run_once_and_match_every_ordering(artifact):
  # evaluate() runs source once per stream and reuses it for every ordering; that
  # is only sound if a real run in another ordering gives the same accuracy.
  from forge_tflm.evaluation.int8_methods import Source
  from forge_tflm.evaluation.protocol import images_to_run, run_stream
  from forge_tflm.runtime.segmented import SegmentedModel
  _, path = artifact
  with open(path, "rb") as f:
    data = f.read()
  cfg = EvalConfig(methods=("source", "forge"), batch_size=8, orderings=3)
  stream = _streams()[1]
  seen = []
  raw = evaluate(cfg, [stream], artifact=data, float_model=None,
                 contract=InputContract(), progress=_Counter(seen))
  assert sum(seen) == images_to_run(cfg, [stream]) == len(stream.labels) * (1 + 3)
  source = Source(SegmentedModel(data, "optimized"))
  x = source.model.quantize_input(InputContract().to_float(stream.images))
  for k in range(3):
    acc = run_stream(source.predict, x, stream.labels, ordering(len(x), k, 0), 8)
    assert raw["accuracy"]["source"]["dark"][k] == acc


class _Counter:
  def __init__(self, seen):
    self.update = seen.append


def test_fp32_methods_restore_the_model(artifact):
  import keras
  src, _ = artifact
  model = keras.saving.load_model(src)
  before = [w.copy() for w in model.get_weights()]
  cfg = EvalConfig(methods=("source-fp32", "bn-adapt", "tent"), batch_size=8)
  raw = evaluate(cfg, _streams(), artifact=None, float_model=model,
                 contract=InputContract())
  for a, b in zip(before, model.get_weights()):
    np.testing.assert_array_equal(a, b)
  assert set(raw["accuracy"]) == {"source-fp32", "bn-adapt", "tent"}


def test_tent_updates_bn_affine_and_reset_restores(artifact):
  import keras
  from forge_tflm.evaluation.fp32_methods import Tent
  src, _ = artifact
  model = keras.saving.load_model(src)
  tent = Tent(model, InputContract())
  x = tiny_models.random_images(8, seed=1)
  gamma0 = tent.params[0].numpy().copy()
  first = tent.predict(x)
  assert not np.array_equal(gamma0, tent.params[0].numpy())
  second = tent.predict(x)
  assert not np.allclose(first, second)  # Predicts from the updated parameters.
  tent.reset()
  np.testing.assert_array_equal(gamma0, tent.params[0].numpy())
  np.testing.assert_allclose(tent.predict(x), first, rtol=1e-5, atol=1e-5)
  # Adaptation works again after a reset (a reset once zeroed the learning rate).
  np.testing.assert_array_equal(tent.optimizer.iterations.numpy(), 1)
  assert not np.array_equal(gamma0, tent.params[0].numpy())
  np.testing.assert_allclose(tent.predict(x), second, rtol=1e-5, atol=1e-5)


def test_run_evaluation_writes_reports(artifact, tmp_path):
  src, path = artifact
  cfg = EvalConfig(methods=("source", "forge", "forge-gated", "scale-adapt"),
                   batch_size=16, orderings=2)
  doc = run_evaluation(cfg, _streams(), artifact_path=path, keras_path=None,
                       output_dir=str(tmp_path), command="forge_tflm eval ...",
                       data_description="generated", show_progress=False)
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["command"] == "forge_tflm eval ..."
  assert saved["config"]["gate"]["probe_images"] == 256  # As run (gate.settings).
  assert len(saved["artifact"]["sha256"]) == 64
  assert saved["results"]["forge"]["streams"]["dark"]["accuracy"] == \
      doc["results"]["forge"]["streams"]["dark"]["accuracy"]
  assert "recovery_mean" in saved["results"]["forge"]["streams"]["dark"]
  assert set(saved["gate"]["fired"]) == {"clean", "dark"}
  csv = (tmp_path / "results.csv").read_text().splitlines()
  assert csv[0].startswith("method,stream") and len(csv) == 1 + 4 * 2
  md = (tmp_path / "results.md").read_text()
  assert "| dark" in md and "mean (corrupted)" in md
  assert (tmp_path / "results.png").read_bytes()[:4] == b"\x89PNG"


def test_summary_recovery_and_hurt():
  raw = {"accuracy": {"source": {"clean": [0.9], "a": [0.5, 0.5], "b": [0.6, 0.6]},
                      "forge": {"clean": [0.9], "a": [0.7, 0.8], "b": [0.5, 0.6]}}}
  raw["accuracy"]["source"]["clean"] = [0.9, 0.9]
  raw["accuracy"]["forge"]["clean"] = [0.9, 0.9]
  t = report.summarize(raw)
  assert t["forge"]["streams"]["a"]["recovery_mean"] == pytest.approx(25.0)
  assert t["forge"]["summary"]["hurt"] == ["b"]
  assert t["forge"]["summary"]["mean_recovery"] == pytest.approx((25.0 - 5.0) / 2)


def test_hurt_is_more_than_the_threshold_under_the_source():
  # "b" is 0.5 point under its source: within the default 1-point threshold, a hurt at 0.
  raw = {"accuracy": {"source": {"a": [0.500], "b": [0.600]},
                      "forge": {"a": [0.480], "b": [0.595]}}}
  t = report.summarize(raw)
  assert t["forge"]["summary"]["hurt"] == ["a"]
  assert t["forge"]["summary"]["hurt_threshold"] == report.HURT_POINTS == 1.0
  assert report.summarize(raw, hurt_threshold=0.0)["forge"]["summary"]["hurt"] == ["a", "b"]
  md = report.to_markdown(t)
  assert "Hurt = more than 1 point under the source: forge: a" in md


def _bars(png: bytes):
  """The chart's bars and error-bar lines, re-drawn the way plot_png draws them."""
  from unittest import mock

  import matplotlib.axes
  calls = []
  real = matplotlib.axes.Axes.bar

  def spy(self, *args, **kwargs):
    calls.append(kwargs)
    return real(self, *args, **kwargs)

  with mock.patch.object(matplotlib.axes.Axes, "bar", spy):
    png()
  return calls


def test_chart_has_a_mean_bar_and_error_bars_only_over_several_orderings():
  one = report.summarize({"accuracy": {"source": {"a": [0.5], "b": [0.6]},
                                       "forge": {"a": [0.7], "b": [0.8]}}})
  calls = _bars(lambda: report.plot_png(one, "t"))
  assert [c["yerr"] for c in calls] == [None, None]
  three = report.summarize({"accuracy": {"source": {"a": [0.5, 0.6, 0.7], "b": [0.6] * 3},
                                         "forge": {"a": [0.7] * 3, "b": [0.8] * 3}}})
  calls = _bars(lambda: report.plot_png(three, "t"))
  assert all(len(c["yerr"]) == 3 for c in calls)  # a, b and the mean
  assert calls[0]["yerr"][0] == pytest.approx(100 * np.std([0.5, 0.6, 0.7]))


def test_chart_title_names_model_stream_and_batch():
  meta = {"artifact": {"path": "runs/r20_forge.tflite"},
          "data": "cifar10 test, generated corruptions, severity 5",
          "config": {"batch_size": 64, "orderings": 1}}
  title = report.plot_title(meta)
  assert "r20_forge.tflite" in title and "severity 5" in title
  assert "batch 64, 1 ordering;" in title
