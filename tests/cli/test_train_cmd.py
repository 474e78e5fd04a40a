"""`forge_tflm train` end to end on a tiny generated image folder."""

import json
import os

from forge_tflm.cli import main as cli
from tests.data import fixtures


def _dataset(tmp_path):
  entries = fixtures.image_folder_entries(per_class=4)
  return fixtures.write_image_folder(str(tmp_path / "data"), entries)


def test_train_writes_model_and_log_and_resumes(tmp_path, capsys):
  data_dir = _dataset(tmp_path)
  out = str(tmp_path / "models" / "r20.keras")
  argv = ["forge_tflm", "train", "--model=resnet20", f"--data_dir={data_dir}",
          f"--output={out}", "--epochs=2", "--warmup_epochs=1", "--batch_size=4",
          "--nojit_compile"]
  assert cli.main(argv) == 0
  assert os.path.exists(out)
  with open(str(tmp_path / "models" / "r20.json")) as f:
    log = json.load(f)
  assert [h["epoch"] for h in log["history"]] == [1, 2]
  assert log["config"]["epochs"] == 2 and log["train_images"] == 12
  assert 0.0 <= log["final_test_accuracy"] <= 1.0
  assert log["parameters"] > 0 and "tensorflow" in log["versions"]
  # The same command again resumes from the checkpoint: nothing left to train.
  mtime = os.path.getmtime(out)
  assert cli.main(argv) == 0
  with open(str(tmp_path / "models" / "r20.json")) as f:
    assert json.load(f)["history"] == log["history"]
  assert os.path.getmtime(out) >= mtime
  # Resuming with another recipe is refused instead of silently mixing runs.
  assert cli.main(argv[:-2] + ["--batch_size=8", "--nojit_compile"]) == 1
  assert "another config" in capsys.readouterr().err

  import keras
  model = keras.saving.load_model(out)
  assert model.output_shape == (None, 3)


def test_train_missing_data_is_one_line_error_and_no_output(tmp_path, capsys):
  out = tmp_path / "m.keras"
  code = cli.main(["forge_tflm", "train", f"--data_dir={tmp_path / 'absent'}",
                   f"--output={out}", "--epochs=1"])
  assert code == 1
  errors = [l for l in capsys.readouterr().err.splitlines() if l.startswith("forge_tflm")]
  assert len(errors) == 1 and "does not exist" in errors[0]
  assert not out.exists()


def test_train_rejects_non_keras_output(tmp_path, capsys):
  data_dir = _dataset(tmp_path)
  code = cli.main(["forge_tflm", "train", f"--data_dir={data_dir}",
                   f"--output={tmp_path / 'm.h5'}", "--epochs=1"])
  assert code == 1
  assert ".keras" in capsys.readouterr().err
