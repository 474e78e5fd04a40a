"""FORGE_RECALIB: options, state, numpy reference and the C core binding.

The op contract is custom_ops/forge_recalib/SPEC.md. `forge_recalib_reference`
is the definition (numpy, reference.py); `forge_recalib_c` runs the C core
(custom_ops/forge_recalib/src/forge_recalib.c, compiled into
forge_tflm.ops._forge_recalib_core; on x86-64 with AVX2 the bit-exact
forge_recalib_s8_x86 loops, else forge_recalib_s8_ansi's) on the same arrays
without copying them.
Both update the `RecalibState` in place and must agree bit for bit.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from forge_tflm.ops import reference
from forge_tflm.ops.options import (ACTIVATIONS, MAX_OPTIONS_BYTES, MODES, PATHS,
                                    VARIANTS, Activation, RecalibOptions, core,
                                    decode_options, encode_options)

__all__ = [
    "ACTIVATIONS", "Activation", "MAX_OPTIONS_BYTES", "QuantParams", "RecalibOp",
    "RecalibOptions", "RecalibState", "bench_memcpy", "c_core_available",
    "c_core_variant", "decode_options", "encode_options", "forge_recalib_c",
    "forge_recalib_reference",
]

_MODE_CODES = {name: code for code, name in enumerate(MODES)}
_PATH_CODES = {name: code for code, name in enumerate(PATHS)}
_VARIANT_CODES = {name: code for code, name in enumerate(VARIANTS)}


@dataclasses.dataclass(frozen=True)
class QuantParams:
  """Per-tensor int8 quantization of the op input x and output y."""
  s_x: float
  z_x: int
  s_y: float
  z_y: int

  def __post_init__(self):
    for name in ("s_x", "z_x", "s_y", "z_y"):
      if np.ndim(getattr(self, name)) != 0:
        raise ValueError(f"per-channel quantization ({name} is an array) is not "
                         "supported: x and y must be per-tensor quantized")


class RecalibState:
  """Per-channel state [mu_0..mu_{C-1}, var_0..var_{C-1}] (float32, SPEC layout).

  `data` is the contiguous buffer the C core updates in place; `mu` and `var`
  are views of it. `reset()` restores the clean targets (beta, gamma_abs^2).
  With `int_scale` (the input scale s_x) the state is the integer arithmetic's
  (SPEC "Integer arithmetic"): int32, mu in Q16 and var in Q12 of x's quantized
  units, reset to beta / s_x and (gamma_abs / s_x)^2.
  """

  def __init__(self, beta: np.ndarray, gamma_abs: np.ndarray,
               int_scale: float | None = None):
    self.beta = np.ascontiguousarray(beta, dtype=np.float32)
    self.gamma_abs = np.ascontiguousarray(gamma_abs, dtype=np.float32)
    self.int_scale = None if int_scale is None else np.float32(int_scale)
    self.data = self._clean()

  def _clean(self) -> np.ndarray:
    if self.int_scale is not None:
      return reference.int_reset_state(self.beta, self.gamma_abs, self.int_scale)
    return reference.reset_state(self.beta, self.gamma_abs)

  @property
  def integer(self) -> bool:
    return self.int_scale is not None

  @property
  def channels(self) -> int:
    return self.beta.shape[0]

  @property
  def mu(self) -> np.ndarray:
    return self.data[:self.channels]

  @property
  def var(self) -> np.ndarray:
    return self.data[self.channels:]

  def reset(self) -> None:
    self.data[:] = self._clean()

  @property
  def nbytes(self) -> int:
    """SRAM bytes of the state."""
    return self.data.nbytes

  def copy(self) -> "RecalibState":
    other = RecalibState.__new__(RecalibState)
    other.beta, other.gamma_abs = self.beta, self.gamma_abs
    other.int_scale = self.int_scale
    other.data = self.data.copy()
    return other


def _code(codes: dict, value: str, what: str) -> int:
  try:
    return codes[value]
  except (KeyError, TypeError):
    raise ValueError(f"unknown {what} {value!r} (one of {', '.join(codes)})") from None


def forge_recalib_reference(x: np.ndarray, state: RecalibState,
                            opts: RecalibOptions, quant: QuantParams,
                            mode: str = "adapt") -> np.ndarray:
  """Numpy reference: returns y (int8, shape of x) and updates `state`."""
  if not isinstance(x, np.ndarray) or x.dtype != np.int8:
    raise ValueError("x must be an int8 numpy array")
  if x.ndim < 2:
    raise ValueError("x must have a batch axis and a channel axis")
  if x.shape[-1] != state.channels:
    raise ValueError(f"x has {x.shape[-1]} channels, state has {state.channels}")
  _code(_MODE_CODES, mode, "mode")
  if mode == "adapt_safe":  # SPEC "Adapt-safe mode"
    mode = "adapt" if opts.label_safe else "source"
  _check_arithmetic(opts, state)
  q = reference.prepare_quant(opts.activation, quant.s_x, quant.z_x,
                              quant.s_y, quant.z_y)
  step = reference.int_recalib_step if opts.integer else reference.recalib_step
  y, new_state = step(x, state.beta, state.gamma_abs, state.data, opts=opts, q=q,
                      mode=mode)
  state.data[:] = new_state
  return y


def _check_arithmetic(opts: RecalibOptions, state: RecalibState) -> None:
  if opts.integer != state.integer:
    raise ValueError(f"options say arithmetic={opts.arithmetic or 'float'}, the state"
                     f" is {'int32' if state.integer else 'float32'}")


def c_core_available() -> bool:
  try:
    from forge_tflm.ops import _forge_recalib_core  # noqa: F401
  except ImportError:
    return False
  return True


def c_core_variant() -> str:
  """Loops that `variant="default"` runs on this machine: "x86_avx512" or
  "x86_avx2" (forge_recalib_s8_x86) or "ansi" (the plain C reference loops,
  e.g. off x86)."""
  return core().DEFAULT_VARIANT


class RecalibOp:
  """One FORGE_RECALIB node on the host, prepared once like the TFLM kernel.

  Construction is Init + Prepare (options, quantization and targets validated,
  constants and scratch set up in C); each call is one Eval on a batch and
  updates `state`; `reset()` is the kernel's Reset. Calls run the C core:
  `variant` "default" is the host's bit-exact SIMD function (c_core_variant()),
  "ansi" the plain C one, "avx2" the host one capped at AVX2; `path` forces the
  per-element pass ("affine" or "lut"). All agree bit for bit.
  """

  def __init__(self, options: RecalibOptions, quant: QuantParams, beta: np.ndarray,
               gamma_abs: np.ndarray, state: RecalibState | None = None):
    self.options = options
    self.quant = quant
    if state is None:
      state = RecalibState(beta, gamma_abs,
                           int_scale=quant.s_x if options.integer else None)
    self.state = state
    _check_arithmetic(options, self.state)
    self._prepared = core().Prepared(options, float(quant.s_x), int(quant.z_x),
                                     float(quant.s_y), int(quant.z_y),
                                     self.state.beta, self.state.gamma_abs)
    # What mode adapt_safe is for this op: the C core's rule (forge_recalib_mode_for).
    self._adapt_safe = MODES[self._prepared.mode_for(_MODE_CODES["adapt_safe"])]

  def with_options(self, options: RecalibOptions) -> "RecalibOp":
    """The same node (sharing its state) prepared with other options; another
    arithmetic starts a clean state of its own format."""
    same = options.integer == self.options.integer
    return RecalibOp(options, self.quant, self.state.beta, self.state.gamma_abs,
                     state=self.state if same else None)

  @property
  def prepared_quant(self) -> tuple:
    """(r, inv_sy, sx2, qmin, qmax) as the C core prepared them."""
    return self._prepared.quant

  def reset(self) -> None:
    self.state.reset()

  def __call__(self, x: np.ndarray, mode: str = "adapt", out: np.ndarray | None = None,
               path: str = "auto", variant: str = "default") -> np.ndarray:
    """y for the batch x (int8 [N, ..., C], C-contiguous); `out` (int8, shape of
    x, may be x itself) receives it. Errors raise ValueError, nothing written."""
    if out is None:
      out = np.empty_like(x) if isinstance(x, np.ndarray) else None
    if mode == "adapt_safe":
      mode = self._adapt_safe
    code = _code(_MODE_CODES, mode, "mode")
    self._prepared.run(x, out, self.state.data, code,
                       _code(_PATH_CODES, path, "per-element path"),
                       _code(_VARIANT_CODES, variant, "variant"))
    return out

  def reference(self, x: np.ndarray, mode: str = "adapt") -> np.ndarray:
    """The numpy definition on the same state (tests)."""
    return forge_recalib_reference(x, self.state, self.options, self.quant, mode)

  def bench(self, x: np.ndarray, reps: int, mode: str = "adapt", path: str = "auto",
            variant: str = "default") -> float:
    """Runs the C core `reps` times in C; returns nanoseconds per call."""
    if mode == "adapt_safe":
      mode = self._adapt_safe
    out = np.empty_like(x)
    total_ns = self._prepared.bench(x, out, self.state.data,
                                    _code(_MODE_CODES, mode, "mode"),
                                    _code(_PATH_CODES, path, "per-element path"),
                                    _code(_VARIANT_CODES, variant, "variant"), int(reps))
    return total_ns / reps


def forge_recalib_c(x: np.ndarray, state: RecalibState, opts: RecalibOptions,
                    quant: QuantParams, mode: str = "adapt",
                    out: np.ndarray | None = None,
                    path: str = "auto", variant: str = "default") -> np.ndarray:
  """One-shot C core call on `state` (prepares a RecalibOp each time; loops
  over batches should keep a RecalibOp). Returns y and updates `state`."""
  op = RecalibOp(opts, quant, state.beta, state.gamma_abs, state=state)
  return op(x, mode=mode, out=out, path=path, variant=variant)


def bench_memcpy(nbytes: int, reps: int) -> float:
  """memcpy of `nbytes` timed in C (same loop harness); ns per copy."""
  src = np.ones(nbytes, dtype=np.int8)
  dst = np.empty_like(src)
  return core().bench_memcpy(dst, src, int(reps)) / reps

