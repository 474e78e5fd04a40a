"""selective: the report from its numbers, and (slow) the experiment end to end."""

import json

import numpy as np
import pytest

from forge_tflm.experiments import common, selective


def synthetic(n=5):
  sites = [f"s{i}" for i in range(n)]
  rec = {s: float(n - i) for i, s in enumerate(sites)}
  ranking = {"recovery_alone": rec}
  curve = list(np.linspace(4, 10, n))
  return {"sites": sites, "source_accuracy": 60.0,
          "held_out": {"corruptions": ["saturate"], "images": 10, "ranking": ranking,
                       "ranked": sites},
          "evaluation": {"images": 20, "ranking": ranking, "ranked": sites[::-1]},
          "top_k_recovery": {"held-out": curve, "oracle": curve[::-1]},
          "all_sites_recovery": 10.0, "top3_share_of_all": 70.0,
          "best_held_out_subset": {"k": 4, "recovery": 11.0},
          "best_oracle_subset": {"k": 2, "recovery": 12.0},
          "converted_top3": {"recovery": 7.1, "simulated_recovery": 7.0}}


def test_markdown_states_each_paper_claim_next_to_ours(tmp_path):
  d = synthetic()
  md = selective.markdown(d, 5)
  assert "| held-out top-3, share of all-site recovery | 93% | 70.0% |" in md
  assert "| best subset chosen on held-out data (k, recovery) | 8, +19.6 | 4, +11.00 |" in md
  assert md.count("\n| ") >= 5 + 5 + 6
  selective.figure(d, 5, str(tmp_path / "f.png"))
  assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_selective_end_to_end(shared_cifar10, tmp_path):
  from forge_tflm.sweep import make_executor
  ctx = common.ExperimentContext(shared_cifar10.rsplit("/", 1)[0], str(tmp_path / "r"),
                                 str(tmp_path / "a"), make_executor("processes"),
                                 "test", images=200, progress=False)
  out = common.run_experiment("selective", ctx)
  doc = json.loads(open(f"{out}/result.json").read())["results"]
  assert len(doc["top_k_recovery"]["held-out"]) == len(doc["sites"]) == 21
  assert doc["top_k_recovery"]["oracle"][-1] == doc["all_sites_recovery"]
