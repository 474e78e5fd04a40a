"""Per-stream results and resuming (forge_tflm.evaluation.resume, run_evaluation):
an interrupted run keeps its finished streams, a resumed one re-does only the others
and ends with exactly the numbers of an uninterrupted run; other configurations are
refused."""

import dataclasses
import json
import os

import numpy as np
import pytest

from forge_tflm.converter.options import ConvertOptions
from forge_tflm.evaluation import run as run_mod
from forge_tflm.evaluation.protocol import EvalConfig, Stream, evaluate_stream
from forge_tflm.evaluation.resume import ResumeError
from forge_tflm.evaluation.run import run_evaluation
from forge_tflm.ops import RecalibOptions
from forge_tflm.testing import tiny_models


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
  d = tmp_path_factory.mktemp("resume")
  _, result = tiny_models.convert_tiny(d, ConvertOptions(recalib=RecalibOptions(momentum=0.2)))
  (d / "plain.tflite").write_bytes(result.plain_tflite)  # The same model, no FORGE ops.
  return str(d / "tiny.tflite")


def _streams(n=24):
  rng = np.random.default_rng(0)
  images = tiny_models.random_images(n, seed=5)
  labels = rng.integers(0, 10, n)
  return [Stream("clean", images, labels),
          Stream("dark", (images * 0.3).astype(np.uint8), labels),
          Stream("bright", np.clip(images.astype(int) + 90, 0, 255).astype(np.uint8), labels)]


CONFIG = EvalConfig(methods=("source", "forge", "forge-gated", "scale-adapt"), batch_size=8,
                    orderings=2)


def _run(artifact, out, streams=None, config=CONFIG, **kw):
  return run_evaluation(config, streams or _streams(), artifact_path=artifact,
                        keras_path=None, output_dir=str(out), command="test",
                        data_description="generated", show_progress=False, **kw)


class _Interrupt:
  """Wraps run.evaluate_stream: records the streams evaluated, and raises
  KeyboardInterrupt (what Ctrl-C does) when stream `stop_at` starts."""

  def __init__(self, monkeypatch, stop_at=None):
    self.seen = []
    real = evaluate_stream  # The real one, not an earlier wrapper.

    def wrapped(config, methods, stream, contract, progress=None):
      if stream.name == stop_at:
        raise KeyboardInterrupt
      self.seen.append(stream.name)
      return real(config, methods, stream, contract, progress)

    monkeypatch.setattr(run_mod, "evaluate_stream", wrapped)


def _numbers(path):
  doc = json.loads((path / "results.json").read_text())
  return doc["results"], doc["gate"]


def test_interrupted_run_resumes_to_the_same_results(artifact, tmp_path, monkeypatch):
  _run(artifact, tmp_path / "whole")

  out = tmp_path / "interrupted"
  probe = _Interrupt(monkeypatch, stop_at="dark")
  with pytest.raises(KeyboardInterrupt):
    _run(artifact, out)
  assert probe.seen == ["clean"]
  # What the interrupted run finished is on disk; no report yet.
  assert sorted(os.listdir(out / "streams")) == ["000_clean.json", "run.json"]
  assert not (out / "results.json").exists()

  # The same run without resume would throw that away: refused.
  with pytest.raises(ResumeError, match="unfinished evaluation .*--resume"):
    _run(artifact, out)

  probe = _Interrupt(monkeypatch)
  doc = _run(artifact, out, resume=True)
  assert probe.seen == ["dark", "bright"]  # Only the unfinished streams.
  assert doc["resume"] == {"resumed": True, "streams_from_earlier_runs": ["clean"],
                           "streams_evaluated_now": ["dark", "bright"]}
  assert _numbers(out) == _numbers(tmp_path / "whole")
  saved = json.loads((out / "results.json").read_text())
  assert saved["resume"]["streams_from_earlier_runs"] == ["clean"]
  assert list(saved["results"]["forge"]["streams"]) == ["clean", "dark", "bright"]
  assert json.loads((out / "streams" / "run.json").read_text())["complete"] is True


def test_resuming_a_finished_run_evaluates_nothing(artifact, tmp_path, monkeypatch):
  out = tmp_path / "out"
  _run(artifact, out)
  before = _numbers(out)
  probe = _Interrupt(monkeypatch)
  doc = _run(artifact, out, resume=True)
  assert probe.seen == [] and doc["resume"]["streams_evaluated_now"] == []
  assert _numbers(out) == before
  # A fresh run (no resume) over a finished one replaces it: everything again.
  _run(artifact, out)
  assert probe.seen == ["clean", "dark", "bright"]
  assert _numbers(out) == before


def test_resume_with_nothing_to_resume_starts_afresh(artifact, tmp_path, monkeypatch):
  probe = _Interrupt(monkeypatch)
  doc = _run(artifact, tmp_path / "new", resume=True)
  assert probe.seen == ["clean", "dark", "bright"] and doc["resume"]["resumed"] is False


@pytest.mark.parametrize("change, named", [
    (dict(config=EvalConfig(methods=("source", "forge"), batch_size=8, orderings=2)),
     "config.methods"),
    (dict(config=EvalConfig(methods=CONFIG.methods, batch_size=4, orderings=2)),
     "config.batch_size"),
    (dict(config=EvalConfig(methods=CONFIG.methods, batch_size=8, orderings=2,
                            option_overrides={"momentum": 0.5})), "config.option_overrides"),
    (dict(streams=_streams(n=20)), "streams"),
])
def test_resume_refuses_another_configuration(artifact, tmp_path, monkeypatch, change,
                                              named):
  out = tmp_path / "out"
  _Interrupt(monkeypatch, stop_at="dark")
  with pytest.raises(KeyboardInterrupt):
    _run(artifact, out)
  _Interrupt(monkeypatch)
  with pytest.raises(ResumeError, match=f"another configuration .*{named}"):
    _run(artifact, out, resume=True, **change)


def test_resume_refuses_another_artifact(artifact, tmp_path, monkeypatch):
  out = tmp_path / "out"
  _Interrupt(monkeypatch, stop_at="dark")
  with pytest.raises(KeyboardInterrupt):
    _run(artifact, out)
  other = tmp_path / "other"
  other.mkdir()
  tiny_models.convert_tiny(other, ConvertOptions(recalib=RecalibOptions(momentum=0.3)))
  _Interrupt(monkeypatch)
  with pytest.raises(ResumeError, match="artifact_sha256"):
    _run(str(other / "tiny.tflite"), out, resume=True)


def test_a_damaged_stream_file_is_named(artifact, tmp_path, monkeypatch):
  out = tmp_path / "out"
  _Interrupt(monkeypatch, stop_at="bright")
  with pytest.raises(KeyboardInterrupt):
    _run(artifact, out)
  bad = out / "streams" / "001_dark.json"
  bad.write_text('{"stream": "dark" "accuracy": {}}')
  _Interrupt(monkeypatch)
  with pytest.raises(ResumeError, match=f"{bad}: not a results file"):
    _run(artifact, out, resume=True)


def test_checks_come_before_any_work(artifact, tmp_path, monkeypatch):
  """A bad output directory, a missing artifact or float model fail before a stream
  is evaluated (they used to fail after the whole evaluation)."""
  probe = _Interrupt(monkeypatch)
  blocker = tmp_path / "file"
  blocker.write_text("x")
  with pytest.raises(NotADirectoryError, match=f"{blocker} is not a directory"):
    _run(artifact, blocker / "out")
  with pytest.raises(FileNotFoundError, match="missing.tflite does not exist"):
    _run(str(tmp_path / "missing.tflite"), tmp_path / "out")
  cfg = EvalConfig(methods=("source", "bn-adapt"), batch_size=8)
  with pytest.raises(ValueError, match="bn-adapt need the float Keras model"):
    _run(artifact, tmp_path / "out", config=cfg)
  with pytest.raises(FileNotFoundError, match="no.keras does not exist"):
    run_evaluation(cfg, _streams(), artifact_path=artifact,
                   keras_path=str(tmp_path / "no.keras"), output_dir=str(tmp_path / "o"),
                   command="t", data_description="d", show_progress=False)
  assert probe.seen == [] and not (tmp_path / "out").exists()


def test_forge_methods_refuse_a_plain_model_and_source_runs(artifact, tmp_path):
  # Before: forge on a model without FORGE ops ran, and equalled source, silently.
  plain = os.path.join(os.path.dirname(artifact), "plain.tflite")
  cfg = EvalConfig(methods=("source", "forge"), batch_size=8)
  with pytest.raises(ValueError, match=f"{plain} has no FORGE_RECALIB ops .*forge"):
    _run(plain, tmp_path / "o", config=cfg)
  doc = _run(plain, tmp_path / "o", config=EvalConfig(methods=("source",), batch_size=8))
  assert set(doc["results"]) == {"source"}


def test_batch_size_over_the_op_limit_is_refused_before_the_run(artifact, tmp_path,
                                                                monkeypatch):
  from forge_tflm.evaluation import checks
  probe = _Interrupt(monkeypatch)
  # 16x16 inputs: the stem's FORGE site is 16x16, so 2^22 / 256 images per call.
  limit = checks.max_m() // 256
  cfg = EvalConfig(methods=("source", "forge"), batch_size=limit + 1)
  with pytest.raises(ValueError, match=f"N\\*H\\*W <= 4194304 .*H\\*W = 256, so the batch"
                                       f" size must be <= {limit}"):
    _run(artifact, tmp_path / "o", config=cfg)
  assert probe.seen == []


def _edit_record(key, value):
  def edit(doc):
    *parents, last = key
    for p in parents:
      doc = doc[p]
    if value is _DELETE:
      del doc[last]
    else:
      doc[last] = value
  return edit


_DELETE = object()


@pytest.mark.parametrize("edit, text, message", [
    # Issue 34: 57.0 printed as "5700.0 +- 0.0", NaN as nan, images=5 was accepted.
    (_edit_record(("accuracy", "forge", 0), 57.0), None,
     r"accuracy\.forge\[0\] is 57\.0, not a fraction in \[0, 1\]"),
    (_edit_record(("accuracy", "source", 1), -0.25), None,
     r"accuracy\.source\[1\] is -0\.25"),
    (None, lambda t: t.replace('"forge": [', '"forge": [NaN, ', 1),
     r"accuracy\.forge must be a list of 2 values"),
    (_edit_record(("accuracy", "forge"), [0.5, float("nan")]), None,
     r"accuracy\.forge\[1\] is NaN, not a fraction"),
    (_edit_record(("images",), 5), None, r"images is 5, but the stream has 24 images"),
    # Missing keys were a KeyError traceback.
    (_edit_record(("seconds",), _DELETE), None, r"seconds is missing"),
    (_edit_record(("accuracy", "scale-adapt"), _DELETE), None,
     r"accuracy must have exactly the methods"),
    (_edit_record(("gate_fired",), _DELETE), None, r"gate_fired is missing"),
    (_edit_record(("seconds", "forge"), float("inf")), None, r"Infinity is not a number"),
    (_edit_record(("order",), "[" * 5000 + "]" * 5000), lambda t: t.replace(
        '"' + "[" * 5000 + "]" * 5000 + '"', "[" * 5000 + "]" * 5000),
     r"not a results file \(not JSON we read \(nested more than 64 levels\)\)"),
], ids=["accuracy_57", "accuracy_negative", "nan_in_list", "accuracy_nan", "images_5",
        "seconds_missing", "method_missing", "gate_missing", "seconds_inf",
        "deep_nesting"])
def test_impossible_stream_results_are_refused(artifact, tmp_path, monkeypatch, edit,
                                               text, message):
  out = tmp_path / "out"
  _Interrupt(monkeypatch, stop_at="bright")
  with pytest.raises(KeyboardInterrupt):
    _run(artifact, out)
  path = out / "streams" / "001_dark.json"
  doc = json.loads(path.read_text())
  if edit is not None:
    edit(doc)
  raw = json.dumps(doc, indent=2)
  path.write_text(text(raw) if text is not None else raw)
  _Interrupt(monkeypatch)
  with pytest.raises(ResumeError) as e:
    _run(artifact, out, resume=True)
  msg = str(e.value)
  assert "\n" not in msg and msg.startswith(f"{path}: "), msg
  assert __import__("re").search(message, msg), msg


def _periodic_setup():
  from forge_tflm.evaluation.gate import GateConfig

  config = dataclasses.replace(CONFIG, gate=GateConfig(probe_images=8, period=8))
  clean, dark, bright = _streams()
  mixed = Stream("mixed", np.concatenate([clean.images, dark.images]),
                 np.concatenate([clean.labels, dark.labels]),
                 domains=np.repeat([0, 1], len(clean.labels)),
                 domain_names=("clean", "dark"))
  return config, [clean, mixed, bright]


def _edits(*edits):
  def edit(doc):
    for e in edits:
      e(doc)
  return edit


@pytest.mark.parametrize("edit, message", [
    # Issue 53: records a run cannot make were resumed into its report.
    (_edits(_edit_record(("gate_decisions", 0), 0), _edit_record(("gate_fired", 0), False),
            _edit_record(("gate_adapted", 0), 0.5)),
     r"gate_decisions\[0\] is 0, but the gate fired or the adapting path"),
    (_edits(_edit_record(("gate_decisions", 0), 1), _edit_record(("gate_fired", 0), True),
            _edit_record(("gate_score", 0), float("nan"))),
     r"gate_score\[0\] is NaN, but the gate fired"),
    (_edit_record(("domain_accuracy", "forge", "foggy"), [0.5, 0.5]),
     r"domain_accuracy\.forge must have exactly the stream's domains clean, dark"),
    (_edit_record(("domain_accuracy", "tent"), {"clean": [0.5, 0.5], "dark": [0.5, 0.5]}),
     r"domain_accuracy must map exactly the methods"),
    (_edit_record(("gate_probed",), _DELETE), r"gate_probed is missing"),
    (_edit_record(("gate_decisions", 1), 10**6), r"gate_decisions\[1\] is 1000000, not 0"
     r" to the stream's 48 images"),
], ids=["adapted_without_decisions", "fired_without_score", "unknown_domain",
        "unknown_method_domains", "probed_missing", "decisions_past_images"])
def test_impossible_gate_and_domain_records_are_refused(artifact, tmp_path, monkeypatch,
                                                        edit, message):
  config, streams = _periodic_setup()
  out = tmp_path / "out"
  _Interrupt(monkeypatch, stop_at="bright")
  with pytest.raises(KeyboardInterrupt):
    _run(artifact, out, streams=streams, config=config)
  path = out / "streams" / "001_mixed.json"
  doc = json.loads(path.read_text())
  assert doc["gate_decisions"] and "domain_accuracy" in doc
  edit(doc)
  path.write_text(json.dumps(doc, indent=2))
  _Interrupt(monkeypatch)
  with pytest.raises(ResumeError) as e:
    _run(artifact, out, streams=streams, config=config, resume=True)
  msg = str(e.value)
  assert "\n" not in msg and msg.startswith(f"{path}: "), msg
  assert __import__("re").search(message, msg), msg


def test_a_consistent_periodic_record_resumes(artifact, tmp_path, monkeypatch):
  """The checks above refuse edits, not what a run writes: an interrupted periodic,
  multi-domain run resumes to the uninterrupted run's numbers."""
  config, streams = _periodic_setup()
  whole, out = tmp_path / "whole", tmp_path / "out"
  _run(artifact, whole, streams=streams, config=config)
  _Interrupt(monkeypatch, stop_at="bright")
  with pytest.raises(KeyboardInterrupt):
    _run(artifact, out, streams=streams, config=config)
  probe = _Interrupt(monkeypatch)
  _run(artifact, out, streams=streams, config=config, resume=True)
  assert probe.seen == ["bright"]
  assert _numbers(out) == _numbers(whole)


def test_gate_lists_in_a_run_without_a_gate_are_refused(artifact, tmp_path, monkeypatch):
  config = dataclasses.replace(CONFIG, methods=("source", "forge"))
  out = tmp_path / "out"
  _Interrupt(monkeypatch, stop_at="bright")
  with pytest.raises(KeyboardInterrupt):
    _run(artifact, out, config=config)
  path = out / "streams" / "001_dark.json"
  doc = json.loads(path.read_text())
  doc["gate_fired"] = [True, True]
  path.write_text(json.dumps(doc))
  _Interrupt(monkeypatch)
  with pytest.raises(ResumeError, match="gate_fired is recorded, but this run's methods"
                                        " have no forge-gated"):
    _run(artifact, out, config=config, resume=True)
