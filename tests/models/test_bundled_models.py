"""The bundled models reproduce the test accuracy their training logs record."""

import functools
import json
import os

import pytest

from tests.conftest import REPO_ROOT

MODELS = ("resnet20_cifar10", "mobilenet_v2_0.5_cifar10")


def _log(name):
  with open(os.path.join(REPO_ROOT, "models", name + ".json")) as f:
    return json.load(f)


@pytest.mark.parametrize("name", MODELS)
def test_log_names_the_command_that_wrote_the_model(name):
  log = _log(name)
  assert log["command"].startswith("forge_tflm train ")
  assert f"--model={log['model']}" in log["command"]
  assert len(log["history"]) == log["config"]["epochs"]
  # A weight-averaged run's model is the average, not its last epoch's weights.
  final = log["swa"] if log.get("swa") else log["history"][-1]
  assert log["final_test_accuracy"] == final["test_accuracy"]
  # A teacher named by its bundled path must be the model bundled there.
  from forge_tflm.fileio import file_sha256
  for path, sha in zip(log["config"].get("teachers", []), log.get("teachers_sha256", [])):
    if path.startswith("models/") and path != f"models/{name}.keras":
      assert file_sha256(os.path.join(REPO_ROOT, path)) == sha, path


@functools.lru_cache(maxsize=1)
def _cifar10_test(path):
  """The test split once per session, as the bundled models' float input."""
  from forge_tflm.artifact import InputContract  # pixels / 255, as the models were trained.
  from forge_tflm.data import load_dataset
  test = load_dataset("cifar10", "test", path)
  return InputContract().to_float(test.images), test.labels


@pytest.mark.parametrize("name", MODELS)
def test_model_reproduces_logged_test_accuracy(shared_cifar10, name):
  import keras

  images, labels = _cifar10_test(shared_cifar10)
  model = keras.saving.load_model(os.path.join(REPO_ROOT, "models", name + ".keras"),
                                  compile=False)
  logits = model.predict(images, batch_size=500, verbose=0)
  accuracy = float((logits.argmax(-1) == labels).mean())
  # Float evaluation with another batch size may flip an image or two.
  assert abs(accuracy - _log(name)["final_test_accuracy"]) <= 2e-4, accuracy
