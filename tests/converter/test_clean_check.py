"""Every conversion passes the clean check (converter/clean_check.py): an int8 model near
chance on its own labelled calibration images is refused with the input contract named,
for each input kind. MLPerf Tiny's ResNet-8 takes raw 0..255 pixels: without
--input_range=0,255 its float .h5 became a 9.2%-accurate model with exit status 0."""

import os

import numpy as np
import pytest

from forge_tflm.artifact import InputContract
from forge_tflm.converter import clean_check
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.converter.pipeline import convert
from forge_tflm.converter.sites import ConversionError
from forge_tflm.data import load_dataset

PIXELS = InputContract("range", 0.0, 255.0)


@pytest.fixture
def calibration(shared_cifar10):
  return load_dataset("cifar10", "train", shared_cifar10).random_subset(100, seed=0)


def test_check_passes_the_right_contract_and_names_the_wrong_one(shared_mlperf_ic,
                                                                 calibration):
  with open(os.path.join(shared_mlperf_ic, "pretrainedResnet_quant.tflite"), "rb") as f:
    model = f.read()
  labels = calibration.labels
  top1, why = clean_check.check(model, PIXELS.to_float(calibration.images), labels, 10,
                                PIXELS.describe())
  assert why is None and top1 > 0.5
  wrong = InputContract()
  top1, why = clean_check.check(model, wrong.to_float(calibration.images), labels, 10,
                                wrong.describe())
  assert top1 < 0.2 and "--input_range=0,1" in why and "--input_range=0,255" in why
  # Labels of another class count say nothing about this model: not checked.
  assert clean_check.check(model, wrong.to_float(calibration.images), labels, 100,
                           "") == (None, None)


def test_keras_model_without_its_input_contract_is_refused(shared_mlperf_ic, calibration,
                                                          tmp_path):
  out = tmp_path / "r8.tflite"
  with pytest.raises(ConversionError, match=r"--input_range=0,255") as e:
    convert(os.path.join(shared_mlperf_ic, "pretrainedResnet.h5"), str(out), calibration,
            ConvertOptions(calibration_size=100))
  assert "\n" not in str(e.value) and "--clean_check=warn" in str(e.value)
  assert not os.listdir(tmp_path)


def test_int8_model_without_its_input_contract_is_refused(shared_mlperf_ic, calibration,
                                                         tmp_path):
  with pytest.raises(ConversionError, match=r"--input_range"):
    convert(os.path.join(shared_mlperf_ic, "pretrainedResnet_quant.tflite"),
            str(tmp_path / "r8.tflite"), calibration, ConvertOptions(calibration_size=100))


def test_onnx_model_at_chance_is_refused_unless_warned(shared_cifar10, calibration,
                                                       tmp_path):
  from tests.converter import onnx_models

  src = str(tmp_path / "random.onnx")
  onnx_models.tiny_onnx_resnet(src, size=32, classes=10)  # untrained: chance on CIFAR-10
  with pytest.raises(ConversionError, match="chance"):
    convert(src, str(tmp_path / "a.tflite"), calibration, ConvertOptions(calibration_size=100))
  result = convert(src, str(tmp_path / "b.tflite"), calibration,
                   ConvertOptions(calibration_size=100, clean_check="warn"))
  assert result.manifest.sites
  assert np.isfinite(len(result.tflite))
