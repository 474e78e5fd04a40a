"""`forge_tflm eval` on bad inputs: every bad flag, path or file fails with one line
naming it, before any data is loaded or evaluated; a plain int8 model is refused for
the FORGE methods; a killed evaluation resumes to the numbers of an uninterrupted one."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from forge_tflm.cli import main as cli
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.ops import RecalibOptions
from forge_tflm.testing import tiny_models
from tests.conftest import REPO_ROOT
from tests.data import fixtures


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  d = tmp_path_factory.mktemp("cli_eval_robust")
  src, result = tiny_models.convert_tiny(
      d, ConvertOptions(recalib=RecalibOptions(window=64)), size=32)
  (d / "plain.tflite").write_bytes(result.plain_tflite)  # No FORGE ops, no manifest.
  data_dir = fixtures.write_image_folder(str(d / "data"), fixtures.image_folder_entries(4))
  return d, src, data_dir


@pytest.fixture
def no_work(monkeypatch):
  """Fails the test if the command loads data, generates corruptions or evaluates."""
  import forge_tflm.data
  from forge_tflm.evaluation import run as run_mod
  from forge_tflm.evaluation import streams

  def forbidden(*args, **kwargs):
    raise AssertionError("expensive work started before the inputs were checked")

  for module, name in ((forge_tflm.data, "load_dataset"), (streams, "generated_streams"),
                       (streams, "cifar_c_streams"), (run_mod, "run_evaluation")):
    monkeypatch.setattr(module, name, forbidden)


def _eval(setup, *flags, artifact="tiny.tflite"):
  d, _, data_dir = setup
  argv = ["forge_tflm", "eval", f"--data_dir={data_dir}", "--corruptions=fog",
          "--batch_size=4"]
  if artifact:
    argv.append(f"--artifact={d / artifact}")
  return cli.main(argv + list(flags))


def _error(capsys) -> str:
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "Traceback" not in err, err
  return err


# -- a plain int8 model ---------------------------------------------------------------

@pytest.mark.parametrize("method", ["forge", "forge-gated", "scale-adapt"])
def test_forge_methods_refuse_a_model_without_forge_ops(setup, capsys, tmp_path, no_work,
                                                        method):
  d = setup[0]
  code = _eval(setup, f"--methods=source,{method}", f"--output_dir={tmp_path}",
               artifact="plain.tflite")
  assert code == 1
  err = _error(capsys)
  assert f"--artifact={d / 'plain.tflite'} has no FORGE_RECALIB ops" in err
  assert method in err


def test_source_alone_runs_on_a_plain_model(setup, capsys, tmp_path):
  code = _eval(setup, "--methods=source", f"--output_dir={tmp_path}",
               artifact="plain.tflite")
  assert code == 0, capsys.readouterr().err
  assert "source" in json.loads((tmp_path / "results.json").read_text())["results"]


# -- flags ------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, named", [
    (["--corruptions="], "--corruptions=: empty corruption name"),
    (["--corruptions=fog,"], "--corruptions=fog,: empty corruption name"),
    (["--corruptions=all,fog"], "'all' cannot be combined"),
    (["--corruptions=fog,fog"], "listed twice"),
    (["--corruptions=fgo"], "--corruptions=fgo: unknown corruption(s) fgo"),
    (["--methods="], "--methods=: no method given"),
    (["--methods=forge,magic"], "--methods=forge,magic: unknown method(s) magic"),
    (["--methods=source,bn-adapt"], "give --keras_model"),
    (["--gate_probe_images=0"], "--gate_probe_images=0: gate probe_images must be >= 1"),
    (["--gate_delta=nan"], "--gate_delta=nan: gate delta must be a finite number"),
    (["--gate_label_window=-1"], "--gate_label_window=-1: gate label_window must be a whole"),
    (["--gate_period=0"], "--gate_period=0: gate period must be >= 1"),
    (["--momentum=0.1", "--window=8"], "--momentum=0.1 --window=8: set at most one"),
    (["--corrupted_from=cifar_c"], "--corrupted_from=cifar_c needs --cifar_c_dir"),
    (["--cifar_c_dir=/tmp"], "--cifar_c_dir=/tmp: only used with --corrupted_from=cifar_c"),
    (["--corrupted_from=tfds", "--include_clean"], "--include_clean needs"),
])
def test_bad_flag_values_are_refused_up_front(setup, capsys, tmp_path, no_work, flags,
                                              named):
  # Before: --corruptions= wrote an empty table, a trailing comma or a typo
  # failed after the other corruptions were generated.
  assert _eval(setup, *flags, f"--output_dir={tmp_path / 'o'}") == 1
  assert named in _error(capsys)
  assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flags, named", [
    (["--limit=-5"], "--limit=-5: -5 is not a non-negative integer"),
    (["--batch_size=0"], "--batch_size=0: 0 is not a positive integer"),
    (["--orderings=0"], "--orderings=0: 0 is not an integer in the range [1, 1000]"),
    # Before: a billion orderings were planned (19.7 GB, no output); a negative seed
    # reached numpy as a traceback.
    (["--orderings=1000000000"], "is not an integer in the range [1, 1000]"),
    (["--seed=-1"], "--seed=-1: -1 is not an integer in the range [0, 4294967295]"),
    (["--seed=4294967296"], "is not an integer in the range [0, 4294967295]"),
    (["--severity=6"], "--severity=6: 6 is not an integer in the range [1, 5]"),
])
def test_out_of_range_numbers_are_usage_errors(setup, capsys, tmp_path, no_work, flags,
                                               named):
  # Before: --limit=-5 evaluated 9,995 images (a negative slice).
  assert _eval(setup, *flags, f"--output_dir={tmp_path}") == 2
  assert named in _error(capsys)


def test_batch_size_over_the_op_limit_is_refused_up_front(setup, capsys, tmp_path,
                                                          no_work):
  from forge_tflm.ops.options import core
  assert core().MAX_M == 1 << 22
  # 32x32 inputs, the stem's FORGE site is 32x32: 2^22 / 1024 = 4096 images per call.
  assert _eval(setup, "--batch_size=4097", f"--output_dir={tmp_path}") == 1
  err = _error(capsys)
  assert "--batch_size=4097" in err and "N*H*W <= 4194304" in err
  assert "--batch_size must be <= 4096" in err and "H*W = 1024" in err


def test_batch_size_help_documents_the_limit(capsys):
  assert cli.main(["forge_tflm", "eval", "--help"]) == 0
  out = " ".join(capsys.readouterr().out.split())
  assert "N*H*W <= 2^22" in out and "--resume" in out


# -- paths ------------------------------------------------------------------------------

def test_bad_output_dirs_fail_before_any_work(setup, capsys, tmp_path, no_work):
  # Before: these failed when the reports were written, after the whole evaluation.
  blocker = tmp_path / "results.txt"
  blocker.write_text("x")
  assert _eval(setup, f"--output_dir={blocker}") == 1
  assert f"--output_dir {blocker} exists and is not a directory" in _error(capsys)
  assert _eval(setup, f"--output_dir={blocker / 'out'}") == 1
  assert f"{blocker} is not a directory" in _error(capsys)
  assert _eval(setup, "--output_dir=/proc/self/forge_out") == 1
  assert "--output_dir /proc/self/forge_out is not writable" in _error(capsys)


def test_missing_inputs_fail_before_any_work(setup, capsys, tmp_path, no_work):
  d, src, _ = setup
  out = f"--output_dir={tmp_path / 'o'}"
  assert _eval(setup, out, artifact="missing.tflite") == 1
  assert f"--artifact {d / 'missing.tflite'} does not exist" in _error(capsys)
  assert _eval(setup, out, artifact="data") == 1
  assert "is not a file" in _error(capsys)
  assert _eval(setup, out, "--methods=source,bn-adapt",
               f"--keras_model={tmp_path / 'no.keras'}") == 1
  assert f"--keras_model {tmp_path / 'no.keras'} does not exist" in _error(capsys)
  assert cli.main(["forge_tflm", "eval", f"--artifact={d / 'tiny.tflite'}",
                   f"--data_dir={tmp_path / 'nodata'}", out]) == 1
  assert f"--data_dir={tmp_path / 'nodata'}: does not exist" in _error(capsys)
  assert cli.main(["forge_tflm", "eval", f"--artifact={d / 'tiny.tflite'}",
                   "--corrupted_from=cifar_c", f"--cifar_c_dir={tmp_path / 'noc'}",
                   out]) == 1
  assert f"--cifar_c_dir={tmp_path / 'noc'}: not a directory" in _error(capsys)
  assert not (tmp_path / "o").exists()


# -- damaged files named ----------------------------------------------------------------

def _copy_artifact(setup, tmp_path):
  d = setup[0]
  (tmp_path / "a.tflite").write_bytes((d / "tiny.tflite").read_bytes())
  (tmp_path / "a.json").write_text((d / "tiny.json").read_text())
  return tmp_path / "a.tflite", tmp_path / "a.json"


def test_damaged_manifest_is_named(setup, capsys, tmp_path, no_work):
  model, manifest = _copy_artifact(setup, tmp_path)
  good = manifest.read_text()
  flags = [f"--artifact={model}", f"--output_dir={tmp_path / 'o'}"]
  manifest.write_text(good.replace('",\n', '"\n', 1))  # Expecting ',' delimiter.
  assert _eval(setup, *flags, artifact=None) == 1
  err = _error(capsys)
  assert str(manifest) in err and "delimiter" in err
  doc = json.loads(good)
  del doc["sites"][0]["input_quantization"]  # Used to be a bare KeyError.
  manifest.write_text(json.dumps(doc))
  assert _eval(setup, *flags, artifact=None) == 1
  err = _error(capsys)
  assert err.startswith(f"forge_tflm eval: error: {manifest}: malformed manifest"), err
  assert "input_quantization" in err


def test_damaged_model_is_named(setup, capsys, tmp_path, no_work):
  model, manifest = _copy_artifact(setup, tmp_path)
  manifest.unlink()
  model.write_bytes(b"\x00" * 64)
  assert _eval(setup, f"--artifact={model}", f"--output_dir={tmp_path / 'o'}",
               artifact=None) == 1
  err = _error(capsys)
  assert str(model) in err and "TFLite" in err, err


def test_damaged_float_model_is_named(setup, capsys, tmp_path):
  bad = tmp_path / "bad.keras"
  bad.write_bytes(b"PK\x03\x04 truncated zip")
  assert _eval(setup, "--methods=source-fp32", f"--keras_model={bad}",
               f"--output_dir={tmp_path / 'o'}", artifact=None) == 1
  assert f"float model {bad}: cannot load it" in _error(capsys)


def test_image_size_mismatch_is_named_before_corrupting(setup, capsys, tmp_path):
  entries = {k: fixtures.random_images(1, size=16, seed=i)[0]
             for i, k in enumerate(fixtures.image_folder_entries(2))}
  data16 = fixtures.write_image_folder(str(tmp_path / "d16"), entries)
  d = setup[0]
  assert cli.main(["forge_tflm", "eval", f"--artifact={d / 'tiny.tflite'}",
                   f"--data_dir={data16}", "--corruptions=fog",
                   f"--output_dir={tmp_path / 'o'}"]) == 1
  err = _error(capsys)
  assert f"--data_dir={data16}" in err and "images are 16x16x3" in err
  assert "takes 32x32x3" in err


def test_image_size_without_corruption_parameters_names_the_flags(setup, capsys, tmp_path):
  # Used to be the library's "pass params=one of [...]", naming no CLI flag.
  entries = {k: fixtures.random_images(1, size=24, seed=i)[0]
             for i, k in enumerate(fixtures.image_folder_entries(2))}
  data24 = fixtures.write_image_folder(str(tmp_path / "d24"), entries)
  assert cli.main(["forge_tflm", "eval", f"--keras_model={setup[1]}",
                   "--methods=source-fp32", f"--data_dir={data24}", "--corruptions=fog",
                   f"--output_dir={tmp_path / 'o'}"]) == 1
  err = _error(capsys)
  assert f"--data_dir={data24}" in err and "images are 24x24" in err
  assert "--corrupted_from=generated" in err and "params=" not in err


def test_corrupt_dataset_archive_is_named(setup, capsys, tmp_path):
  tar = tmp_path / "data.tar.gz"
  tar.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 40)  # A gzip header, then nothing.
  assert cli.main(["forge_tflm", "eval", f"--artifact={setup[0] / 'tiny.tflite'}",
                   f"--data_dir={tar}", f"--output_dir={tmp_path / 'o'}"]) == 1
  assert f"{tar}: damaged or not a tar archive" in _error(capsys)


# -- interrupted and resumed ------------------------------------------------------------

_KILLER = """
import os, sys
from forge_tflm.evaluation import resume
save = resume.ResultStore.save
def save_then_die(self, record):
  save(self, record)
  os._exit(137)  # A hard kill right after the first stream's file is in place.
resume.ResultStore.save = save_then_die
from forge_tflm.cli import main
sys.exit(main.main(["forge_tflm"] + sys.argv[1:]))
"""


def test_killed_evaluation_resumes_to_the_uninterrupted_results(setup, capsys, tmp_path,
                                                                monkeypatch):
  d, _, data_dir = setup
  args = ["eval", f"--artifact={d / 'tiny.tflite'}", f"--data_dir={data_dir}",
          "--methods=source,forge,forge-gated", "--corruptions=fog,contrast,snow",
          "--batch_size=4", "--orderings=2", "--gate_probe_images=4"]
  assert cli.main(["forge_tflm"] + args + [f"--output_dir={tmp_path / 'whole'}"]) == 0

  out = tmp_path / "killed"
  r = subprocess.run([sys.executable, "-c", _KILLER] + args + [f"--output_dir={out}"],
                     capture_output=True, text=True, timeout=600,
                     env=dict(os.environ, PYTHONPATH=REPO_ROOT), cwd=REPO_ROOT)
  assert r.returncode == 137, r.stderr[-2000:]
  assert sorted(os.listdir(out / "streams")) == ["000_fog.json", "run.json"]
  assert not (out / "results.json").exists()

  # Re-running without --resume would lose the finished stream: refused, named.
  capsys.readouterr()
  assert cli.main(["forge_tflm"] + args + [f"--output_dir={out}"]) == 1
  assert "--resume" in _error(capsys)
  # Another configuration is refused too.
  assert cli.main(["forge_tflm"] + args + [f"--output_dir={out}", "--resume",
                                           "--orderings=3"]) == 1
  assert "config.orderings: 2 before, 3 now" in _error(capsys)

  from forge_tflm.evaluation import protocol, run as run_mod
  evaluated = []
  real = protocol.evaluate_stream

  def counting(config, methods, stream, *a, **kw):
    evaluated.append(stream.name)
    return real(config, methods, stream, *a, **kw)

  monkeypatch.setattr(run_mod, "evaluate_stream", counting)
  assert cli.main(["forge_tflm"] + args + [f"--output_dir={out}", "--resume"]) == 0
  assert evaluated == ["contrast", "snow"]  # Only the unfinished streams.
  whole = json.loads((tmp_path / "whole" / "results.json").read_text())
  resumed = json.loads((out / "results.json").read_text())
  assert resumed["results"] == whole["results"] and resumed["gate"] == whole["gate"]
  assert resumed["resume"] == {"resumed": True, "streams_from_earlier_runs": ["fog"],
                               "streams_evaluated_now": ["contrast", "snow"]}
  assert whole["resume"]["resumed"] is False


def test_ctrl_c_keeps_the_finished_streams(setup, capsys, tmp_path, monkeypatch):
  from forge_tflm.evaluation import protocol, run as run_mod
  real = protocol.evaluate_stream

  def interrupted(config, methods, stream, *a, **kw):
    if stream.name == "contrast":
      raise KeyboardInterrupt
    return real(config, methods, stream, *a, **kw)

  monkeypatch.setattr(run_mod, "evaluate_stream", interrupted)
  out = tmp_path / "o"
  assert _eval(setup, "--corruptions=fog,contrast", f"--output_dir={out}") == 130
  record = json.loads((out / "streams" / "000_fog.json").read_text())
  assert record["stream"] == "fog" and set(record["accuracy"]) == {"source", "forge"}
  assert np.isfinite(record["accuracy"]["forge"]).all()
