"""`forge_tflm train` end to end on a tiny generated image folder.

Three runs of the recipe's rarer paths (resuming across a JIT setting, resuming a
checkpoint older than weight averaging, distillation from teachers) carry the slow
mark: each trains for ~25 s, and CI's budget goes to the deployed path."""

import json
import os

import pytest

from forge_tflm.cli import main as cli
from tests.data import fixtures


def _dataset(tmp_path):
  entries = fixtures.image_folder_entries(per_class=4)
  return fixtures.write_image_folder(str(tmp_path / "data"), entries)


def _quick_argv(data_dir):
  return ["forge_tflm", "train", "--model=resnet20", f"--data_dir={data_dir}",
          "--warmup_epochs=0", "--batch_size=4", "--nojit_compile"]


def _stop_after(output, epochs, edit_config=lambda config: None):
  """Rewinds `output`'s checkpoint state as if the run had stopped after `epochs`."""
  state_path = output + ".ckpt/state.json"
  with open(state_path) as f:
    state = json.load(f)
  state["history"] = state["history"][:epochs]
  state.pop("finished", None)
  edit_config(state["config"])
  with open(state_path, "w") as f:
    json.dump(state, f)


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
  # Resuming an unfinished run with another recipe is refused instead of silently
  # mixing runs (also when only --limit_train differs).
  _stop_after(out, 1)
  assert cli.main(argv[:-2] + ["--batch_size=8", "--nojit_compile"]) == 1
  assert "another config" in capsys.readouterr().err
  assert cli.main(argv + ["--limit_train=6"]) == 1
  assert "another config" in capsys.readouterr().err
  assert cli.main(argv) == 0  # The same recipe finishes it.

  import keras
  model = keras.saving.load_model(out)
  assert model.output_shape == (None, 3)


@pytest.mark.slow
def test_train_resumes_with_another_jit_setting(tmp_path, monkeypatch):
  """XLA changes the speed, not the recipe: a stopped run may resume without it."""
  import keras
  data_dir = _dataset(tmp_path)
  out = str(tmp_path / "r20.keras")
  argv = ["forge_tflm", "train", "--model=resnet20", f"--data_dir={data_dir}",
          f"--output={out}", "--epochs=2", "--warmup_epochs=0", "--batch_size=4"]
  assert cli.main(argv + ["--nojit_compile"]) == 0
  # Simulate a run stopped after its first epoch.
  _stop_after(out, 1, lambda config: config.update(jit_compile=True))

  # ... whose checkpoint was compiled with XLA.
  real_load = keras.saving.load_model
  def load_model(*args, **kwargs):
    model = real_load(*args, **kwargs)
    model.jit_compile = True
    return model
  monkeypatch.setattr(keras.saving, "load_model", load_model)
  seen = []
  real_fit = keras.Model.fit
  def fit(self, *args, **kwargs):
    seen.append(self.jit_compile)
    return real_fit(self, *args, **kwargs)
  monkeypatch.setattr(keras.Model, "fit", fit)
  assert cli.main(argv + ["--nojit_compile"]) == 0
  assert seen == [False]  # Only epoch 2 ran, with the resumed run's setting.
  with open(str(tmp_path / "r20.json")) as f:
    log = json.load(f)
  assert [h["epoch"] for h in log["history"]] == [1, 2]
  assert log["config"]["jit_compile"] is False


def test_train_missing_data_is_one_line_error_and_no_output(tmp_path, capsys):
  out = tmp_path / "m.keras"
  code = cli.main(["forge_tflm", "train", f"--data_dir={tmp_path / 'absent'}",
                   f"--output={out}", "--epochs=3"])
  assert code == 1
  errors = [l for l in capsys.readouterr().err.splitlines() if l.startswith("forge_tflm")]
  assert len(errors) == 1 and "does not exist" in errors[0]
  assert not out.exists()


def test_train_rejects_non_keras_output(tmp_path, capsys):
  data_dir = _dataset(tmp_path)
  code = cli.main(["forge_tflm", "train", f"--data_dir={data_dir}",
                   f"--output={tmp_path / 'm.h5'}", "--epochs=3"])
  assert code == 1
  assert ".keras" in capsys.readouterr().err


def test_train_init_from_starts_at_the_given_weights(tmp_path, capsys):
  import keras
  import numpy as np
  from forge_tflm.models import build_model
  from forge_tflm.training.train import load_initial_weights

  data_dir = _dataset(tmp_path)
  first = str(tmp_path / "first.keras")
  base = _quick_argv(data_dir)
  assert cli.main(base + [f"--output={first}", "--epochs=1"]) == 0
  trained = keras.saving.load_model(first, compile=False).get_weights()
  fresh = build_model("resnet20", 3, (32, 32, 3), 5e-4)
  assert not all(np.array_equal(a, b) for a, b in zip(fresh.get_weights(), trained))
  load_initial_weights(fresh, first)
  for a, b in zip(fresh.get_weights(), trained):
    np.testing.assert_array_equal(a, b)

  second = str(tmp_path / "second.keras")
  assert cli.main(base + [f"--output={second}", "--epochs=1", f"--init_from={first}",
                          "--learning_rate=0.01"]) == 0
  with open(str(tmp_path / "second.json")) as f:
    log = json.load(f)
  assert log["config"]["init_from"] == first and len(log["init_from_sha256"]) == 64

  # Another architecture is refused with a clear error and no output.
  third = tmp_path / "third.keras"
  assert cli.main(["forge_tflm", "train", "--model=mobilenet_v2_0.5",
                   f"--data_dir={data_dir}", f"--output={third}", "--epochs=1",
                   f"--init_from={first}", "--warmup_epochs=0", "--nojit_compile"]) == 1
  assert "architecture differs" in capsys.readouterr().err
  assert not third.exists()


def test_train_warmup_longer_than_the_run_is_a_clear_error(tmp_path, capsys):
  data_dir = _dataset(tmp_path)
  out = tmp_path / "m.keras"
  assert cli.main(["forge_tflm", "train", f"--data_dir={data_dir}", f"--output={out}",
                   "--epochs=2", "--warmup_epochs=2"]) == 1
  assert "warmup_epochs must be in [0, epochs)" in capsys.readouterr().err
  assert not out.exists()


def test_train_with_weight_averaging_saves_the_average(tmp_path):
  import keras
  import numpy as np
  from forge_tflm.training.swa import WeightAverage

  data_dir = _dataset(tmp_path)
  out = str(tmp_path / "swa.keras")
  argv = ["forge_tflm", "train", "--model=resnet20", f"--data_dir={data_dir}",
          f"--output={out}", "--epochs=3", "--warmup_epochs=0", "--batch_size=4",
          "--swa_epochs=2", "--swa_learning_rate=0.01", "--nojit_compile"]
  assert cli.main(argv) == 0
  with open(str(tmp_path / "swa.json")) as f:
    log = json.load(f)
  assert log["swa"]["epochs_averaged"] == 2 and log["swa"]["batchnorm_batches"] == 3
  assert log["final_test_accuracy"] == log["swa"]["test_accuracy"]
  assert [h["learning_rate"] for h in log["history"][1:]] == pytest.approx([0.01] * 2)
  with open(out + ".ckpt/swa_average.npz", "rb") as f:
    average = WeightAverage.from_bytes(f.read())
  saved = keras.saving.load_model(out, compile=False)
  last = keras.saving.load_model(out + ".ckpt/last.keras", compile=False)
  for mean, w, w_last in zip(average.weights, saved.trainable_weights,
                             last.trainable_weights):
    np.testing.assert_allclose(w.numpy(), mean, rtol=1e-6, atol=1e-7)
  assert not all(np.array_equal(w.numpy(), l.numpy())  # The average, not the last step.
                 for w, l in zip(saved.trainable_weights, last.trainable_weights))

  # A run stopped after its first averaged epoch resumes with that average.
  _stop_after(out, 2)
  first = WeightAverage()
  first.add(average.weights)
  with open(out + ".ckpt/swa_average.npz", "wb") as f:
    f.write(first.to_bytes())
  assert cli.main(argv) == 0
  with open(out + ".ckpt/swa_average.npz", "rb") as f:
    assert WeightAverage.from_bytes(f.read()).count == 2


@pytest.mark.slow
def test_train_resumes_a_checkpoint_written_before_averaging_existed(tmp_path):
  data_dir = _dataset(tmp_path)
  out = str(tmp_path / "old.keras")
  argv = ["forge_tflm", "train", "--model=resnet20", f"--data_dir={data_dir}",
          f"--output={out}", "--epochs=2", "--warmup_epochs=0", "--batch_size=4",
          "--nojit_compile"]
  assert cli.main(argv) == 0
  def drop_averaging_fields(config):
    for key in ("swa_epochs", "swa_learning_rate"):
      del config[key]
  _stop_after(out, 1, drop_averaging_fields)
  assert cli.main(argv) == 0
  with open(str(tmp_path / "old.json")) as f:
    assert [h["epoch"] for h in json.load(f)["history"]] == [1, 2]


@pytest.mark.slow
def test_train_with_teachers_distills_and_resumes(tmp_path, capsys):
  data_dir = _dataset(tmp_path)
  teacher = str(tmp_path / "teacher.keras")
  base = _quick_argv(data_dir)
  assert cli.main(base + [f"--output={teacher}", "--epochs=1"]) == 0
  out = str(tmp_path / "student.keras")
  argv = base + [f"--output={out}", "--epochs=2", f"--teacher={teacher}",
                 f"--teacher={teacher}", "--distillation_weight=0.5",
                 "--swa_epochs=1"]
  assert cli.main(argv) == 0
  with open(str(tmp_path / "student.json")) as f:
    log = json.load(f)
  assert log["config"]["teachers"] == [teacher, teacher]
  assert log["config"]["distillation_weight"] == 0.5
  assert len(log["teachers_sha256"]) == 2 and len(log["teachers_sha256"][0]) == 64
  assert 0.0 <= log["final_test_accuracy"] <= 1.0
  assert all(0.0 <= h["train_accuracy"] <= 1.0 for h in log["history"])
  # The saved student is a plain classifier that loads without this package's loss.
  import keras
  assert keras.saving.load_model(out, compile=False).output_shape == (None, 3)

  # Resuming (the stored config holds lists, the flags give tuples) is accepted...
  _stop_after(out, 1)
  assert cli.main(argv) == 0
  with open(str(tmp_path / "student.json")) as f:
    assert [h["epoch"] for h in json.load(f)["history"]] == [1, 2]
  # ...but an unfinished run is not resumed with another set of teachers.
  _stop_after(out, 1)
  assert cli.main(argv[:-3] + ["--distillation_weight=0.5", "--swa_epochs=1"]) == 1
  assert "another config" in capsys.readouterr().err


def test_train_with_a_teacher_for_other_classes_is_a_clear_error(tmp_path, capsys):
  from tests.training.test_distill import _tiny_classifier
  data_dir = _dataset(tmp_path)
  teacher = str(tmp_path / "teacher.keras")
  _tiny_classifier(10, 0, (32, 32, 3)).save(teacher)
  out = tmp_path / "student.keras"
  assert cli.main(["forge_tflm", "train", f"--data_dir={data_dir}", f"--output={out}",
                   "--epochs=1", "--warmup_epochs=0", f"--teacher={teacher}",
                   "--nojit_compile"]) == 1
  assert "10 classes, the data has 3" in capsys.readouterr().err
  assert not out.exists()


def test_a_finished_run_does_not_block_a_new_recipe_on_its_output(tmp_path):
  data_dir = _dataset(tmp_path)
  out = str(tmp_path / "r20.keras")
  assert cli.main(_quick_argv(data_dir) + [f"--output={out}", "--epochs=1"]) == 0
  # Issue 20: the finished run's checkpoint made this refuse ("another config").
  assert cli.main(_quick_argv(data_dir) + [f"--output={out}", "--epochs=2"]) == 0
  with open(str(tmp_path / "r20.json")) as f:
    assert [h["epoch"] for h in json.load(f)["history"]] == [1, 2]


def test_limit_train_tests_on_a_random_subset_not_the_first_class(tmp_path):
  data_dir = _dataset(tmp_path)  # 3 classes, the test split sorted by label
  out = str(tmp_path / "small.keras")
  assert cli.main(_quick_argv(data_dir) + [f"--output={out}", "--epochs=1",
                                          "--limit_train=4"]) == 0
  with open(str(tmp_path / "small.json")) as f:
    log = json.load(f)
  assert log["train_images"] == 4 and log["test_images"] == 4
  assert log["config"]["limit_train"] == 4
  # The first 4 test images are all class 0; a random 4 are not.
  assert sum(1 for c in log["test_class_counts"] if c) > 1, log["test_class_counts"]


def test_failed_init_from_leaves_no_checkpoint_folder(tmp_path, capsys):
  data_dir = _dataset(tmp_path)
  out = str(tmp_path / "x.keras")
  bad = tmp_path / "broken.keras"
  bad.write_bytes(b"not a keras file")
  assert cli.main(_quick_argv(data_dir) + [f"--output={out}", "--epochs=1",
                                          f"--init_from={bad}"]) == 1
  assert not os.path.exists(out + ".ckpt")
  assert cli.main(_quick_argv(data_dir) + [f"--output={out}", "--epochs=1",
                                          f"--init_from={tmp_path / 'missing.keras'}"]) == 1
  assert "--init_from" in capsys.readouterr().err.splitlines()[-1]
