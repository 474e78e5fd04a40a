"""forge_tflm export-firmware writes all of its outputs or none, and checks where it
writes before any slow work: the fuzz seed artifact (8x8x3, one FORGE site) and a
synthetic image stream in place of the dataset (no build, no dataset)."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

from forge_tflm.cli.main import main as cli
from forge_tflm.deploy import export, streams
from forge_tflm.testing import artifact_fuzz as af

IMAGES = 3


@pytest.fixture
def artifact(tmp_path, monkeypatch):
  """The seed artifact and its manifest; corrupted_stream replaced by random images."""
  model = af.seed_model()
  path = tmp_path / "art" / "seed.tflite"
  path.parent.mkdir()
  path.write_bytes(model)
  (tmp_path / "art" / "seed.json").write_text(json.dumps(af.seed_manifest(model)))

  def stream(data_dir, corruption, severity, limit, seed, ordering_index, dataset,
             cache_dir, label_order=None):
    streams_seen.append(label_order)
    rng = np.random.default_rng(seed)
    return streams.ImageStream("synthetic", rng.integers(0, 256, (limit, 8, 8, 3), np.uint8),
                               rng.integers(0, 10, limit), np.arange(limit))

  streams_seen.clear()
  monkeypatch.setattr(export, "corrupted_stream", stream)
  return str(path)


streams_seen: list = []  # The label_order each export asked the (synthetic) stream for.


def _tree(root) -> dict:
  """Every path under root -> its bytes (None for a directory)."""
  out = {}
  for d, dirs, files in os.walk(root):
    for name in dirs:
      out[os.path.relpath(os.path.join(d, name), root)] = None
    for name in files:
      with open(os.path.join(d, name), "rb") as f:
        out[os.path.relpath(os.path.join(d, name), root)] = f.read()
  return out


def _export(artifact, out, **kw):
  return export.export_firmware(artifact, str(out), images=kw.pop("images", IMAGES), **kw)


def _check_complete(out, images):
  """The four outputs, of the same export."""
  assert sorted(os.listdir(out)) == sorted(export.OUTPUTS)
  doc = export.load_expected(str(out))
  assert doc["images"] == images == len(doc["per_image"])
  assert doc["input_bytes"] == 8 * 8 * 3
  assert os.path.getsize(out / "images.bin") == images * doc["input_bytes"]
  assert f"forge_app_num_images = {images};" in (out / "forge_app_data.cc").read_text()


@pytest.mark.parametrize("exchange", ["atomic", "two_renames"])
def test_export_replaces_a_previous_export_whole(tmp_path, artifact, monkeypatch, exchange):
  """With renameat2's exchange, and without (other systems: the earlier set moves
  aside, the new one takes its place)."""
  if exchange == "two_renames":
    monkeypatch.setattr(export, "exchange_paths", lambda a, b: False)
  out = tmp_path / "gen"
  _export(artifact, out, images=2)
  _check_complete(out, 2)
  (out / "images.bin").chmod(0o600)
  _export(artifact, out, images=IMAGES)
  _check_complete(out, IMAGES)
  assert sorted(os.listdir(tmp_path)) == ["art", "gen"]  # no temporary left beside it


def test_a_failed_swap_puts_the_earlier_export_back(tmp_path, artifact, monkeypatch):
  out = tmp_path / "gen"
  _export(artifact, out, images=2)
  before = _tree(tmp_path)
  rename = os.rename

  def failing(a, b):
    if str(b) == str(out) and ".tmp-" in str(a) and not str(a).endswith(".old"):
      raise OSError(errno.EIO, os.strerror(errno.EIO))
    rename(a, b)

  monkeypatch.setattr(export, "exchange_paths", lambda a, b: False)
  monkeypatch.setattr(export.os, "rename", failing)
  with pytest.raises(OSError, match="nothing was changed"):
    _export(artifact, out)
  assert _tree(tmp_path) == before


def test_a_folder_named_expected_json_ends_with_no_new_files(tmp_path, artifact, capsys):
  out = tmp_path / "gen"
  (out / "expected.json").mkdir(parents=True)
  before = _tree(tmp_path)
  assert cli(["forge_tflm", "export-firmware", artifact, f"--output_dir={out}",
              f"--images={IMAGES}"]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "expected.json" in err[0] and str(out) in err[0], err
  assert _tree(tmp_path) == before


@pytest.mark.parametrize("leftover", ["stray_file", "partial_outputs"])
def test_leftovers_of_an_earlier_failed_export_do_not_fail_a_later_one(tmp_path, artifact,
                                                                      leftover):
  """What an interrupted export of earlier versions left: its staging folder with
  a stray file in it, or a part of its outputs."""
  out = tmp_path / "gen"
  (out / ".export.partial").mkdir(parents=True)
  (out / ".export.partial" / "stray.tmp").write_text("left by an interrupted export")
  if leftover == "partial_outputs":
    (out / "forge_app_data.h").write_text("// an older export\n")
  _export(artifact, out)
  _check_complete(out, IMAGES)


@pytest.mark.parametrize("failing", ["write_c_arrays", "write_image_stream", "json_dump"])
@pytest.mark.parametrize("earlier", [False, True])
def test_out_of_disk_space_leaves_nothing_behind(tmp_path, artifact, monkeypatch, failing,
                                                 earlier):
  """A write failing with ENOSPC: no new file anywhere; an earlier export stays whole."""
  out = tmp_path / "gen"
  if earlier:
    _export(artifact, out, images=2)
  before = _tree(tmp_path)

  def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  if failing == "json_dump":
    monkeypatch.setattr(export.json, "dump", full)
  else:
    monkeypatch.setattr(export, failing, full)
  with pytest.raises(OSError, match="No space left on device") as e:
    _export(artifact, out)
  assert _tree(tmp_path) == before
  assert str(out) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case", ["a_file", "folder_named_output", "foreign_file"])
def test_output_dir_is_checked_before_the_slow_work(tmp_path, artifact, monkeypatch, capsys,
                                                     case):
  """The artifact is not even loaded when the outputs could not be written."""
  from forge_tflm.artifact import Artifact

  out = tmp_path / "gen"
  if case == "a_file":
    out.write_text("not a folder")
  elif case == "folder_named_output":
    (out / "images.bin").mkdir(parents=True)
  else:
    out.mkdir()
    (out / "notes.txt").write_text("mine")
  before = _tree(tmp_path)

  def slow(*args, **kwargs):
    raise AssertionError("loaded the artifact before checking --output_dir")

  monkeypatch.setattr(Artifact, "load", slow)
  assert cli(["forge_tflm", "export-firmware", artifact, f"--output_dir={out}"]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and str(out) in err[0], err
  assert _tree(tmp_path) == before


@pytest.mark.parametrize("flags, spec", [([], "shuffled"), (["--label_order=sorted"], "sorted"),
                                         (["--label_order=dirichlet", "--dirichlet_alpha=0.5"],
                                          "dirichlet(alpha=0.5, slot=1)")])
def test_label_order_flags_reach_the_stream_and_expected_json(tmp_path, artifact, flags, spec):
  """--label_order / --dirichlet_alpha: the stream's order at batch 1 (one image per
  Dirichlet slot), recorded in expected.json."""
  out = tmp_path / "gen"
  assert cli(["forge_tflm", "export-firmware", artifact, f"--output_dir={out}",
              f"--images={IMAGES}", *flags]) == 0
  (order,) = streams_seen
  assert order.spec == spec
  assert export.load_expected(str(out))["label_order"] == spec


def test_every_model_the_host_refuses_is_refused_before_anything_is_written(tmp_path,
                                                                         capsys):
  """Issue 53 (host = device on model acceptance): of mutated models, the ones the
  evaluator's model check refuses reached the device app (996 ran to status=ok, 483
  crashed it). export-firmware, the tool that puts a model on a board, refuses each
  in one line before any work: 40 such mutants of the seed, each with a manifest
  rewritten to match its bytes (so only the model's own checks can refuse it)."""
  from forge_tflm.model_check import ModelCheckError, check_model

  seed = af.seed_model()
  refused = []
  for index in range(2000):
    data, mutator, _ = af.mutate(seed, index)
    try:
      check_model(data, "mutant")
    except ModelCheckError:
      refused.append((index, data, mutator))
    if len(refused) == 40:
      break
  assert len(refused) == 40 and len({m for _, _, m in refused}) >= 4
  for index, data, mutator in refused:
    art = tmp_path / f"m{index}"
    art.mkdir()
    (art / "m.tflite").write_bytes(data)
    (art / "m.json").write_text(json.dumps(af.mutant_manifest(
        data, af.seed_manifest(seed), "field")))
    out = tmp_path / f"out{index}"
    assert cli(["forge_tflm", "export-firmware", str(art / "m.tflite"),
                f"--output_dir={out}", f"--images={IMAGES}"]) == 1, (index, mutator)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], (index, mutator, err)
    assert not out.exists(), (index, mutator)


def test_gate_flags_reach_the_firmware_and_its_expected_outputs(tmp_path, artifact):
  """export-firmware --mode=gated takes eval's --gate_* flags (issue 50: a camera that
  only sees shuffled scenes turns the detector off with --gate_label_window=0); before,
  a firmware always ran the defaults. The settings reach the firmware's defines (the
  expected outputs are computed with the same GateConfig); unset ones keep a device's
  defaults (period 10,240)."""
  out = tmp_path / "gen"
  assert cli(["forge_tflm", "export-firmware", artifact, f"--output_dir={out}",
              f"--images={IMAGES}", "--mode=gated", "--gate_label_window=0",
              "--gate_probe_images=2"]) == 0
  header = (out / "forge_app_data.h").read_text()
  assert "#define FORGE_APP_GATE_LABEL_WINDOW 0" in header, header[-800:]
  assert "#define FORGE_APP_GATE_PROBE_IMAGES 2" in header
  assert "#define FORGE_APP_GATE_PERIOD 10240" in header
