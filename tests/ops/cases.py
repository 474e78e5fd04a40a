"""Randomized FORGE_RECALIB cases shared by the parity test and the vector generator.

Draws cover the SPEC's corners: batch 1..64, spatial 1x1..32x32, 1..256
channels, every activation, momentum and window modes, both variance
estimators, extreme scales/zero points/targets/eps, constant channels and
saturated inputs. Most cases are small so that thousands run in seconds.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from forge_tflm import ops

_ACTS = ("none", "relu", "relu6")
_VARS = ("batch", "running")


@dataclasses.dataclass
class Case:
  beta: np.ndarray
  gamma_abs: np.ndarray
  opts: ops.RecalibOptions
  quant: ops.QuantParams
  batches: list  # int8 arrays [N, H, W, C], one per step
  modes: list  # "adapt" / "frozen" / "source", one per step


def _log_uniform(rng, lo, hi):
  return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _scale(rng):
  kind = rng.integers(10)
  if kind == 0:
    return float(rng.choice([2.0**-40, 2.0**40]))
  if kind == 1:
    return _log_uniform(rng, 2.0**-40, 2.0**40)
  return _log_uniform(rng, 1e-4, 10.0)


def _zero_point(rng):
  if rng.integers(5) == 0:
    return int(rng.choice([-128, 127]))
  return int(rng.integers(-128, 128))


def _targets(rng, c, s_x, z_x):
  kind = rng.integers(8)
  if kind == 0:  # Extreme magnitudes.
    beta = rng.choice([-2.0**40, 2.0**40, 0.0, 1e-30], size=c)
    gamma = rng.choice([0.0, 2.0**40, 1e-30, 1.0], size=c)
  elif kind == 1:
    beta = rng.normal(0, 10, size=c)
    gamma = np.zeros(c)
  else:  # Consistent with the input's dequantized range: near no-op.
    beta = rng.normal(0, 20, size=c) * s_x
    gamma = np.abs(rng.normal(20, 10, size=c)) * s_x
  beta = np.clip(np.asarray(beta, np.float32), -2.0**40, 2.0**40)
  gamma = np.clip(np.abs(np.asarray(gamma, np.float32)), 0, 2.0**40)
  return beta.astype(np.float32), gamma.astype(np.float32)


def _options(rng):
  act = _ACTS[rng.integers(3)]
  variance = _VARS[rng.integers(2)]
  kind = rng.integers(6)
  if kind == 0:
    eps = float(rng.choice([1e-45, 1e-38, 1e30, 3.4e38]))
  elif kind == 1:
    eps = _log_uniform(rng, 1e-30, 10.0)
  else:
    eps = float(rng.choice([1e-5, 1e-3]))
  if rng.integers(2):
    r = rng.integers(5)
    momentum = 0.0 if r == 0 else 1.0 if r == 1 else float(rng.uniform())
    return ops.RecalibOptions(momentum=momentum, eps=eps, activation=act,
                              variance=variance)
  window = int(rng.choice([1, 2, 7, 64, 100, 1000, 2**31 - 1])
               if rng.integers(2) else rng.integers(1, 300))
  return ops.RecalibOptions(window=window, eps=eps, activation=act,
                            variance=variance)


def _batch(rng, n, h, w, c):
  kind = rng.integers(8)
  shape = (n, h, w, c)
  if kind == 0:  # Saturated.
    x = rng.choice(np.array([-128, 127], np.int8), size=shape)
  elif kind == 1:
    x = np.full(shape, rng.choice([-128, 127]), np.int8)
  elif kind <= 3:
    x = rng.integers(-128, 128, size=shape, dtype=np.int8)
  else:
    center = rng.uniform(-140, 140, size=c)
    spread = rng.choice([0.0, 0.5, 3.0, 30.0, 100.0], size=c)
    x = np.clip(np.rint(rng.normal(center, spread, size=shape)), -128, 127)
    x = x.astype(np.int8)
  if rng.integers(4) == 0:  # Some constant channels.
    mask = rng.random(c) < 0.5
    x[..., mask] = rng.integers(-128, 128, size=int(mask.sum()), dtype=np.int8)
  return np.ascontiguousarray(x)


def random_case(rng, max_elements: int = 4096, steps: int | None = None,
                shape: tuple | None = None) -> Case:
  """A random stream; shape drawn (log-uniform) under max_elements if not given."""
  if shape is None:
    while True:
      n = int(rng.choice([1, 64])) if rng.integers(4) == 0 else int(
          np.exp(rng.uniform(0, np.log(64.999))))
      h = int(np.exp(rng.uniform(0, np.log(32.999))))
      w = h if rng.integers(2) else int(np.exp(rng.uniform(0, np.log(32.999))))
      c = int(rng.choice([1, 256])) if rng.integers(6) == 0 else int(
          np.exp(rng.uniform(0, np.log(256.999))))
      if n * h * w * c <= max_elements:
        break
  else:
    n, h, w, c = shape
  s_x, s_y = _scale(rng), _scale(rng)
  z_x, z_y = _zero_point(rng), _zero_point(rng)
  beta, gamma = _targets(rng, c, s_x, z_x)
  if steps is None:
    steps = int(rng.choice([1, 1, 2, 3, 5]))
  modes = [{0: "frozen", 1: "source"}.get(int(rng.integers(6)), "adapt")
           for _ in range(steps)]
  return Case(beta=beta, gamma_abs=gamma, opts=_options(rng),
              quant=ops.QuantParams(s_x, z_x, s_y, z_y),
              batches=[_batch(rng, n, h, w, c) for _ in range(steps)],
              modes=modes)
