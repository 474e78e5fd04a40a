"""Layer selection: ranking units, strategies, the sites file, executor equality."""

import json
import os

import numpy as np
import pytest

from forge_tflm.cli import main as cli
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.evaluation import selection
from forge_tflm.ops import RecalibOptions
from forge_tflm.sweep import make_executor
from forge_tflm.testing import tiny_models
from tests.data import fixtures


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  d = tmp_path_factory.mktemp("select")
  tiny_models.convert_tiny(d, ConvertOptions(recalib=RecalibOptions(window=16)), size=32)
  data_dir = fixtures.write_image_folder(str(d / "data"), fixtures.image_folder_entries(4))
  return str(d / "tiny.tflite"), data_dir


def config(**kw):
  base = dict(images=0, batch_size=4, corruptions=("speckle_noise", "saturate"))
  base.update(kw)
  return selection.SelectConfig(**base)


def test_config_validation():
  with pytest.raises(ValueError, match="strategy"):
    selection.SelectConfig(strategy="best")
  with pytest.raises(ValueError, match="unknown corruption"):
    selection.SelectConfig(corruptions=("rain",))
  with pytest.raises(ValueError, match="k must be"):
    selection.SelectConfig(k=0)
  assert not selection.SelectConfig().sees_evaluation
  assert selection.SelectConfig(split="test", corruptions=("fog",)).sees_evaluation


def test_ranking_units_are_what_they_claim(setup):
  artifact, data_dir = setup
  streams = config().streams(data_dir)
  r = selection.rank_sites(artifact, streams, batch_size=4, progress=False)
  assert r.sites == tuple(selection.site_names(artifact)) and len(r.sites) == 5
  # Adapting no site is the source; each single-site unit adapts exactly that site.
  one = selection.SiteUnit(artifact, streams[0], (r.sites[2],), 4)
  _, model = selection.worker_model(artifact, "optimized")
  x, labels = selection.stream_inputs(artifact, streams[0])
  model.reset()
  pred = np.concatenate([model.run(x[i], mode="source") for i in
                         np.array_split(np.arange(len(x)), 9)])
  assert r.source[streams[0].corruption] == pytest.approx(float(
      (pred.argmax(1) == labels).mean()))
  assert selection.unit_accuracy(one) == r.alone[r.sites[2]][streams[0].corruption]
  assert model.adapting is None  # restored after the unit
  assert r.ranked()[0] == max(r.sites, key=lambda s: r.recovery(r.alone[s]))


@pytest.mark.parametrize("strategy", ["top-k", "greedy"])
def test_select_picks_k_sites_in_model_order(setup, strategy):
  artifact, data_dir = setup
  sel = selection.select(artifact, data_dir, config(strategy=strategy, k=2), progress=False)
  assert len(sel.sites) == 2
  order = list(sel.ranking.sites)
  assert list(sel.sites) == sorted(sel.sites, key=order.index)
  if strategy == "top-k":
    assert set(sel.sites) == set(sel.ranking.ranked()[:2])
  else:
    assert [s for s, _ in sel.greedy_steps][0] == sel.ranking.ranked()[0]
    assert sel.recovery == sel.greedy_steps[-1][1]


def test_results_do_not_depend_on_the_executor(setup):
  artifact, data_dir = setup
  streams = config().streams(data_dir)
  subsets = [(), None, (selection.site_names(artifact)[0],)]
  runs = {kind: selection.measure_subsets(artifact, streams, subsets, batch_size=4,
                                          executor=make_executor(kind, workers=2),
                                          progress=False)
          for kind in ("inline", "processes")}
  assert runs["inline"] == runs["processes"]
  pytest.importorskip("ray")
  assert selection.measure_subsets(artifact, streams, subsets, batch_size=4,
                                   executor=make_executor("ray", workers=2),
                                   progress=False) == runs["inline"]


def test_workers_read_corruptions_from_the_shared_cache(setup, tmp_path, monkeypatch):
  artifact, data_dir = setup
  cache = str(tmp_path / "corruptions")
  streams = config().streams(data_dir, cache_dir=cache)
  selection.measure_subsets(artifact, streams, [(), None], batch_size=4,
                            executor=make_executor("processes", workers=2), progress=False)
  files = sorted(os.listdir(cache))
  stamps = [os.stat(os.path.join(cache, f)).st_mtime_ns for f in files]
  assert len(files) == 2  # one per corruption, generated once by prepare()
  selection.measure_subsets(artifact, streams, [()], batch_size=4,
                            executor=make_executor("processes", workers=2), progress=False)
  assert [os.stat(os.path.join(cache, f)).st_mtime_ns for f in files] == stamps


def test_select_command_writes_a_sites_file_convert_takes(setup, tmp_path, capsys):
  artifact, data_dir = setup
  out = tmp_path / "sites.json"
  code = cli.main(["forge_tflm", "select", f"--artifact={artifact}",
                   f"--data_dir={data_dir}", "--images=0", "--batch_size=4", "--k=2",
                   "--corruptions=speckle_noise,spatter", "--executor=inline",
                   f"--output={out}"])
  assert code == 0, capsys.readouterr().err
  printed = capsys.readouterr().out
  assert "| rank | site |" in printed and "wrote" in printed
  doc = json.loads(out.read_text())
  assert len(doc["sites"]) == 2 and doc["command"].startswith("forge_tflm select")
  assert doc["ranking"]["sites"] == selection.site_names(artifact)
  from forge_tflm.cli.convert_cmd import parse_sites
  assert parse_sites(f"@{out}") == tuple(doc["sites"])


def test_select_command_errors(setup, tmp_path, capsys):
  artifact, data_dir = setup
  assert cli.main(["forge_tflm", "select", f"--data_dir={data_dir}",
                   f"--output={tmp_path / 's.json'}"]) == 1
  assert "--artifact is required" in capsys.readouterr().err
  assert cli.main(["forge_tflm", "select", f"--artifact={artifact}",
                   "--corruptions=rain", f"--output={tmp_path / 's.json'}"]) == 1
  assert "unknown corruption" in capsys.readouterr().err
  assert cli.main(["forge_tflm", "select", f"--artifact={artifact}",
                   "--ray_address=auto", f"--output={tmp_path / 's.json'}"]) == 1
  assert "--ray_address needs --executor=ray" in capsys.readouterr().err


def test_k_beyond_the_sites_is_refused_before_any_work(setup, tmp_path, capsys,
                                                       monkeypatch):
  """Issue 34: select --k=50 on 21 sites silently selected all of them."""
  artifact, data_dir = setup
  n = len(selection.site_names(artifact))

  def must_not_run(*args, **kwargs):
    raise AssertionError("ranking started before k was checked")

  monkeypatch.setattr(selection, "rank_sites", must_not_run)
  with pytest.raises(ValueError, match=f"k={n + 1} but the artifact has {n} FORGE sites"):
    selection.select(artifact, data_dir, config(k=n + 1), progress=False)
  out = tmp_path / "s.json"
  assert cli.main(["forge_tflm", "select", f"--artifact={artifact}", "--k=50",
                   f"--data_dir={data_dir}", f"--output={out}"]) == 1
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and f"--k: k=50 but the artifact has {n} FORGE sites" in err
  assert not out.exists()
  with pytest.raises(ValueError, match="k must be an integer >= 1, not -2"):
    config(k=-2)
