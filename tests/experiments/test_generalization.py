"""generalization: each dataset layout runs unchanged when present, and a missing one
says what it needs. Small generated data; one training epoch."""

import json

import pytest

from forge_tflm.experiments import common, generalization
from forge_tflm.sweep import make_executor
from tests.data import fixtures


def test_missing_datasets_are_reported_not_faked(tmp_path):
  ctx = common.ExperimentContext(str(tmp_path / "cifar10"), str(tmp_path / "r"),
                                 str(tmp_path / "a"), images=4, progress=False)
  outcome = generalization.run(ctx)
  rows = outcome.data["rows"]
  assert list(rows) == [r.title for r in generalization.ROWS]
  assert all(r == {"ran": False, "reason": r["reason"]} for r in rows.values())
  title = generalization.ROWS[1].title
  assert rows[title]["reason"].startswith(
      f"cifar100 not available at {tmp_path / 'cifar100'}")
  assert f"| {title} | not run: cifar100 not available" in outcome.markdown
  assert outcome.artifacts == ()


@pytest.mark.slow  # Trains and converts three models (~90 s): outside CI's budget.
def test_each_layout_runs_when_present(tmp_path):
  data = tmp_path / "datasets"
  c10 = fixtures.write_image_folder(str(data / "cifar10"), fixtures.image_folder_entries(2))
  fixtures.write_cifar100_pickles(str(data / "cifar100"), n=12)
  tiny, _, _ = fixtures.write_tiny_imagenet(str(data / "tiny"), per_class=4)
  ctx = common.ExperimentContext(
      c10, str(tmp_path / "r"), str(tmp_path / "a"), make_executor("inline"), "test",
      images=6, progress=False, dataset_dirs={"tiny_imagenet": tiny},
      train={"epochs": 1, "warmup_epochs": 0, "batch_size": 8, "jit_compile": False},
      convert={"clean_check": "warn"})  # one epoch on 12 images: at chance
  out = common.run_experiment("generalization", ctx)
  rows = json.loads(open(f"{out}/result.json").read())["results"]["rows"]
  assert all(r["ran"] for r in rows.values()), rows
  assert rows["ResNet-20 on CIFAR-100"]["classes"] == 100
  assert rows["MobileNetV2-0.5 on Tiny-ImageNet"]["classes"] == 3
  for r in rows.values():
    assert len(r["per_corruption"]) == 15 and r["images_per_stream"] == 6
