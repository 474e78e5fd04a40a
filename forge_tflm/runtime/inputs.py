"""uint8 pixels -> an artifact's int8 input, as the evaluator computes it.

Below the evaluator, the experiments and the firmware tools (forge_tflm.deploy
re-exports it), so that none of them imports another to prepare inputs.
"""

from __future__ import annotations

import numpy as np


def model_input(artifact, images_uint8: np.ndarray, manifest=None) -> np.ndarray:
  """uint8 pixels -> the artifact's int8 input, as the evaluator computes it (the
  manifest's input contract, then the model's input quantization).

  artifact: a forge_tflm.artifact.Artifact, a .tflite path (its manifest is read from
  beside it) or bytes (then pass `manifest`, or the default contract pixel/255
  applies)."""
  from forge_tflm.artifact import Artifact, InputContract
  from forge_tflm.runtime.segmented import SegmentedModel

  if isinstance(artifact, (bytes, bytearray)):
    artifact = Artifact("<bytes>", bytes(artifact), manifest)
  elif not isinstance(artifact, Artifact):
    artifact = Artifact.load(artifact)
  contract = artifact.input_contract if artifact.manifest else InputContract()
  model = SegmentedModel(artifact.model, "reference")
  return model.quantize_input(contract.to_float(np.asarray(images_uint8)))
