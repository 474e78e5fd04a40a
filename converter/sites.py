"""A Conv->BN site and the clean BN targets recorded for it at fold time."""

from __future__ import annotations

import dataclasses

import numpy as np


class ConversionError(ValueError):
  """Bad converter input; the message is one line meant for the user."""


def first_line(error: BaseException) -> str:
  """The first line of an exception from a library, for a one-line error."""
  text = str(error).strip()
  return text.splitlines()[0] if text else type(error).__name__


@dataclasses.dataclass(frozen=True)
class BNSite:
  """One former Conv->BN(->activation) site of a float model.

  Attributes:
    name: stable site name (the BN layer's path, e.g. "stage1_block1_1_bn").
    conv: path of the convolution feeding the BN.
    kind: "conv" or "depthwise".
    activation: activation fused after the BN (a name of forge_tflm.ops.ACTIVATIONS).
    beta: BN offset [C], the clean per-channel mean target.
    gamma_abs: |BN scale| [C], the clean per-channel std target.
    eps: BN epsilon.
    folded_kernel: the conv kernel with BN folded in, in TFLite layout
      (CONV_2D: [O,H,W,I]; DEPTHWISE_CONV_2D: [1,H,W,C]); used to find the
      conv in the converted model by its weights, never by order or name.
  """

  name: str
  conv: str
  kind: str
  activation: str
  beta: np.ndarray
  gamma_abs: np.ndarray
  eps: float
  folded_kernel: np.ndarray

  @property
  def channels(self) -> int:
    return int(self.beta.shape[0])


def fold_scale(gamma: np.ndarray, moving_var: np.ndarray, eps: float) -> np.ndarray:
  """Per-output-channel factor that BN folding multiplies the kernel by."""
  return (np.asarray(gamma, np.float64) / np.sqrt(np.asarray(moving_var, np.float64) + eps))
