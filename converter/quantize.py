"""TFLiteConverter: full int8 (BN folded, per-channel weights, per-tensor activations,
int8 input and output) and the float model of the same graph (BN folded, for the
parity gate, converter/parity.py)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
from absl import logging

from forge_tflm.converter.sites import ConversionError, first_line


def representative_dataset(images: np.ndarray, batch: int = 1):
  """Generator factory yielding float inputs one image at a time (TFLite's calibrator)."""
  def generate():
    for i in range(0, len(images), batch):
      yield [images[i:i + batch]]
  return generate


def _convert(converter, calibration_inputs: np.ndarray | None) -> bytes:
  """Full int8 with calibration inputs, else float32."""
  import tensorflow as tf

  if calibration_inputs is not None:
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative_dataset(calibration_inputs)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
  # Keras 3's export prints its whole signature (one line per captured variable)
  # to stdout; keep that out of the user's terminal but available at -v 1.
  captured = io.StringIO()
  try:
    with contextlib.redirect_stdout(captured):
      return bytes(converter.convert())
  except Exception as e:
    raise ConversionError(f"TFLiteConverter failed: {first_line(e)}") from e
  finally:
    if captured.getvalue():
      logging.vlog(1, "TFLiteConverter printed:\n%s", captured.getvalue())


def convert_keras(model, calibration_inputs: np.ndarray | None) -> bytes:
  """The full-int8 (with calibration inputs) or float flatbuffer of a Keras model."""
  import tensorflow as tf

  return _convert(tf.lite.TFLiteConverter.from_keras_model(model), calibration_inputs)


def convert_saved_model(saved_model_dir: str, calibration_inputs: np.ndarray | None) -> bytes:
  """Same for a SavedModel directory (the ONNX path, via onnx2tf)."""
  import tensorflow as tf

  return _convert(tf.lite.TFLiteConverter.from_saved_model(saved_model_dir),
                  calibration_inputs)
