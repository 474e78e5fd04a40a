"""Training checkpoints survive a save that is interrupted."""

import os

import pytest

from forge_tflm.training.train import atomic_save_model


class _Model:
  def __init__(self, fail: bool):
    self.fail = fail

  def save(self, path):
    with open(path, "wb") as f:
      f.write(b"partial")
    if self.fail:
      raise KeyboardInterrupt  # The run is stopped mid-save.


def test_interrupted_save_keeps_the_previous_checkpoint(tmp_path):
  path = str(tmp_path / "last.keras")
  atomic_save_model(_Model(fail=False), path)
  with open(path, "wb") as f:
    f.write(b"good checkpoint")
  with pytest.raises(KeyboardInterrupt):
    atomic_save_model(_Model(fail=True), path)
  assert open(path, "rb").read() == b"good checkpoint"
  assert os.listdir(tmp_path) == ["last.keras"]  # No temporary left behind.
