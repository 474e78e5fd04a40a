"""The converted int8 model's top-1 on its own labelled calibration images.

Every conversion passes here: a model near chance on clean images of its own classes
cannot be right, and the usual cause is an input contract the model was not trained with
(MLPerf Tiny's ResNet-8 takes 0..255 pixels; converted with the default 0..1 it scores
9.2%). Refused below CHANCE_FACTOR times chance, naming the flags that set the contract.
"""

from __future__ import annotations

import numpy as np

from forge_tflm.converter.parity import run_tflite

CHANCE_FACTOR = 2.0


def check(int8_tflite: bytes, x_float: np.ndarray, labels: np.ndarray | None,
          label_classes: int, contract: str) -> tuple[float | None, str | None]:
  """(top-1, why it cannot be right or None); top-1 None when the labels are not of the
  model's classes (none, or a set with another number of classes)."""
  if labels is None or len(labels) == 0:
    return None, None
  outputs, _ = run_tflite(int8_tflite, x_float)
  classes = int(np.prod(outputs.shape[1:]))
  if classes != label_classes:
    return None, None
  top1 = float(np.mean(np.argmax(outputs.reshape(len(outputs), -1), axis=1) == labels))
  chance = 1.0 / classes
  if top1 >= CHANCE_FACTOR * chance:
    return top1, None
  return top1, (
      f"the converted int8 model classifies {100 * top1:.1f}% of {len(labels)} clean"
      f" calibration images correctly (chance: {100 * chance:.1f}%): give the input"
      f" contract the model was trained with (now {contract}; --input_range=0,255 for"
      " raw pixels, or --input_mean/--input_std)")
