"""`forge_tflm convert` end to end on a tiny model and generated calibration images."""

import json
import os
import re
import subprocess
import sys

import pytest

from forge_tflm.cli import convert_cmd
from forge_tflm.cli import main as cli
from forge_tflm.testing import tiny_models
from tests.data import fixtures


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  d = tmp_path_factory.mktemp("cli_convert")
  src = str(d / "tiny.keras")
  tiny_models.tiny_resnet(size=32).save(src)
  data_dir = fixtures.write_image_folder(str(d / "data"), fixtures.image_folder_entries(4))
  return d, src, data_dir


def test_convert_writes_all_outputs(setup, capsys):
  d, src, data_dir = setup
  out = str(d / "out" / "tiny_forge.tflite")
  code = cli.main(["forge_tflm", "convert", f"--model={src}", f"--output={out}",
                   f"--data_dir={data_dir}", "--c_array", "--sites=stem_bn,dw_bn",
                   "--momentum=0.05", "--variance=batch"])
  assert code == 0, capsys.readouterr().err
  assert "2 FORGE sites" in capsys.readouterr().out
  with open(str(d / "out" / "tiny_forge.json")) as f:
    manifest = json.load(f)
  assert [s["name"] for s in manifest["sites"]] == ["stem_bn", "dw_bn"]
  assert manifest["sites"][0]["options"]["variance"] == "batch"
  assert manifest["command"].startswith("forge_tflm convert --model=")
  assert manifest["calibration"]["images"] == 12  # The whole (small) train split.
  for suffix in ("_model_data.h", "_model_data.cc"):
    assert os.path.exists(str(d / "out" / f"tiny_forge{suffix}"))


def test_sites_from_file(setup, capsys, tmp_path):
  d, src, data_dir = setup
  selection = tmp_path / "sites.json"  # Not sel.json: the manifest of sel.tflite goes there.
  selection.write_text(json.dumps({"sites": ["b1_bn"]}))
  out = str(tmp_path / "sel.tflite")
  assert cli.main(["forge_tflm", "convert", f"--model={src}", f"--output={out}",
                   f"--data_dir={data_dir}", f"--sites=@{selection}"]) == 0
  assert "1 FORGE sites" in capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    (["--sites=missing_bn"], "unknown site(s) missing_bn"),
    (["--input_range=0"], "--input_range needs two numbers"),
    (["--preact_range=max"], "preact_range must be"),
])
def test_bad_input_one_line_error_no_output(setup, capsys, tmp_path, extra, message):
  d, src, data_dir = setup
  out = tmp_path / "bad.tflite"
  code = cli.main(["forge_tflm", "convert", f"--model={src}", f"--output={out}",
                   f"--data_dir={data_dir}"] + extra)
  errors = [l for l in capsys.readouterr().err.splitlines() if l.startswith("forge_tflm")]
  assert code == 1 and len(errors) == 1 and message in errors[0]
  assert os.listdir(tmp_path) == []


def test_missing_calibration_data(setup, capsys, tmp_path):
  _, src, _ = setup
  code = cli.main(["forge_tflm", "convert", f"--model={src}",
                   f"--output={tmp_path / 'o.tflite'}", f"--data_dir={tmp_path / 'nodata'}"])
  assert code == 1 and "does not exist" in capsys.readouterr().err
  assert not (tmp_path / "o.tflite").exists()


def test_parse_sites():
  assert convert_cmd.parse_sites("all") == "all"
  assert convert_cmd.parse_sites("a, b") == ("a", "b")
  with pytest.raises(ValueError):
    convert_cmd.parse_sites(" , ")


@pytest.mark.parametrize("extra,message", [
    (["--momentum=2"], "momentum must be a number in [0, 1]"),
    (["--momentum=0.1", "--window=8"], "set at most one of momentum and window"),
    (["--eps=-1"], "eps must be finite and > 0"),
    (["--window=0"], "window must be in [1, 2^31-1]"),
    (["--sites=none", "--momentum=7"], "momentum must be a number in [0, 1]"),
])
def test_invalid_forge_option_fails_before_any_conversion_work(
    setup, capsys, tmp_path, monkeypatch, extra, message):
  """One line, exit 1, and neither TensorFlow, the data nor the converter touched."""
  from forge_tflm import quiet
  from forge_tflm.converter import pipeline
  from forge_tflm import data

  def must_not_run(*args, **kwargs):
    raise AssertionError("conversion work started before the options were checked")

  monkeypatch.setattr(quiet, "import_quietly", must_not_run)
  monkeypatch.setattr(pipeline, "convert", must_not_run)
  monkeypatch.setattr(data, "load_dataset", must_not_run)
  d, src, data_dir = setup
  code = cli.main(["forge_tflm", "convert", f"--model={src}",
                   f"--output={tmp_path / 'x.tflite'}", f"--data_dir={data_dir}"] + extra)
  err = capsys.readouterr().err
  assert code == 1, err
  assert err.count("\n") == 1 and message in err, err
  assert not os.listdir(tmp_path)


# TensorFlow's C++ log lines ("I0000 00:00:... reader.cc:83] Reading SavedModel...")
# and the converter's own prints.
_TF_NOISE = re.compile(r"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \w+\.cc:\d+\]|SavedModel|"
                       r"fully_quantize|oneDNN", re.M)


@pytest.mark.parametrize("verbose", [False, True])
def test_tensorflow_logging_only_with_verbose(setup, tmp_path, verbose):
  """In a fresh process, as a user runs it: the command's own lines only, unless
  --verbose (which shows that the pattern does catch TensorFlow's logging)."""
  d, src, data_dir = setup
  out = tmp_path / "quiet.tflite"
  argv = [sys.executable, "-m", "forge_tflm.cli.main", "convert", f"--model={src}",
          f"--output={out}", f"--data_dir={data_dir}"] + (["--verbose"] if verbose else [])
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "5 FORGE sites" in r.stdout
  noise = _TF_NOISE.findall(r.stdout + r.stderr)
  if verbose:
    assert noise, "--verbose should show TensorFlow's logging"
  else:
    assert not noise, r.stdout + r.stderr


@pytest.mark.parametrize("case,message", [
    ("directory", "--output '{out}' is a directory"),
    ("plain_is_output", "--plain_output and --output are the same file"),
    ("training_log", "exists and was not written by forge_tflm convert"),
    ("missing_model", "--model"),
])
def test_bad_paths_fail_before_any_conversion_work(setup, capsys, tmp_path, monkeypatch,
                                                   case, message):
  """Issue 20: these failed after ~15 s of conversion (a directory output left the
  manifest, C array and plain model behind), or succeeded wrongly: --plain_output equal
  to --output wrote the plain model under the FORGE name; an output beside the model
  with its stem overwrote the training log <stem>.json with the manifest."""
  from forge_tflm import quiet
  from forge_tflm.converter import pipeline

  def must_not_run(*args, **kwargs):
    raise AssertionError("conversion work started before the paths were checked")

  monkeypatch.setattr(quiet, "import_quietly", must_not_run)
  monkeypatch.setattr(pipeline, "convert", must_not_run)
  d, src, data_dir = setup
  model = str(tmp_path / "r20.keras")
  with open(src, "rb") as f_in, open(model, "wb") as f_out:
    f_out.write(f_in.read())
  out = str(tmp_path / "out.tflite")
  extra = []
  if case == "directory":
    os.mkdir(out)
  elif case == "plain_is_output":
    extra = [f"--plain_output={out}"]
  elif case == "training_log":
    (tmp_path / "r20.json").write_text('{"history": [], "final_test_accuracy": 0.9}')
    out = str(tmp_path / "r20.tflite")
  elif case == "missing_model":
    model = str(tmp_path / "nope.keras")
  before = sorted(os.listdir(tmp_path))
  code = cli.main(["forge_tflm", "convert", f"--model={model}", f"--output={out}",
                   f"--data_dir={data_dir}", "--c_array"] + extra)
  err = capsys.readouterr().err
  assert code == 1 and err.count("\n") == 1 and message.format(out=out) in err, err
  assert sorted(os.listdir(tmp_path)) == before
  if case == "training_log":
    assert "final_test_accuracy" in (tmp_path / "r20.json").read_text()
