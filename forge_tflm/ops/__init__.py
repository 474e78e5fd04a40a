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
import numbers

import numpy as np
from flatbuffers import flexbuffers

from forge_tflm.ops import reference

__all__ = [
    "MAX_OPTIONS_BYTES", "QuantParams", "RecalibOptions", "RecalibState",
    "bench_c", "bench_memcpy", "c_core_available", "c_core_variant",
    "decode_options", "encode_options", "forge_recalib_c",
    "forge_recalib_reference",
]

# Same limit as the C++ parser (forge_recalib_options.h): a valid map is ~100 B.
MAX_OPTIONS_BYTES = 512
_INT32_MAX = 2**31 - 1
_OPTION_KEYS = ("momentum", "window", "eps", "activation", "variance")
_ACT_CODES = {"none": 0, "relu": 1, "relu6": 2}
_VAR_CODES = {"batch": 0, "running": 1}
_MODE_CODES = {"adapt": 0, "frozen": 1}
_PATH_CODES = {"auto": 0, "affine": 1, "lut": 2}


_FLT_MAX = float(np.finfo(np.float32).max)


def _is_real(v) -> bool:
  return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _to_float32(v) -> np.float32 | None:
  """float32 of v, or None if v is outside the float32 range or NaN (as C++)."""
  v = float(v)
  if not -_FLT_MAX <= v <= _FLT_MAX:
    return None
  return np.float32(v)


@dataclasses.dataclass(frozen=True)
class RecalibOptions:
  """Op options. Exactly one of `momentum` (fixed EMA rate in [0, 1]) and
  `window` (rate min(1, N / window) for batch N) must be given.

  Float fields are stored as the float32 value the op uses, so encoding and
  decoding round-trip exactly.
  """
  momentum: float | None = None
  window: int | None = None
  eps: float = float(reference.DEFAULT_EPS)
  activation: str = "none"
  variance: str = "running"  # Default until the evaluator's measurement decides.

  def __post_init__(self):
    if (self.momentum is None) == (self.window is None):
      raise ValueError("exactly one of momentum or window must be set")
    if self.momentum is not None:
      if not _is_real(self.momentum):
        raise ValueError("momentum must be a number")
      m = _to_float32(self.momentum)
      if m is None or not 0.0 <= m <= 1.0:
        raise ValueError("momentum must be a number in [0, 1]")
      object.__setattr__(self, "momentum", float(m))
    else:
      if not isinstance(self.window, numbers.Integral) or isinstance(
          self.window, (bool, np.bool_)):
        raise ValueError("window must be an integer")
      if not 1 <= int(self.window) <= _INT32_MAX:
        raise ValueError("window must be in [1, 2^31-1]")
      object.__setattr__(self, "window", int(self.window))
    if not _is_real(self.eps):
      raise ValueError("eps must be a number")
    eps = _to_float32(self.eps)
    if eps is None or not eps > 0:
      raise ValueError("eps must be finite and > 0")
    object.__setattr__(self, "eps", float(eps))
    if self.activation not in _ACT_CODES:
      raise ValueError(f"unknown activation {self.activation!r}")
    if self.variance not in _VAR_CODES:
      raise ValueError(f"unknown variance estimator {self.variance!r}")

  @property
  def use_window(self) -> bool:
    return self.window is not None


@dataclasses.dataclass(frozen=True)
class QuantParams:
  """Per-tensor int8 quantization of the op input x and output y."""
  s_x: float
  z_x: int
  s_y: float
  z_y: int


def encode_options(opts: RecalibOptions) -> bytes:
  """Flexbuffer map with every key written explicitly (custom_options)."""
  fbb = flexbuffers.Builder()
  with fbb.Map():
    if opts.use_window:
      fbb.Key("window")
      fbb.Int(opts.window)
    else:
      fbb.Key("momentum")
      fbb.Float(opts.momentum)
    fbb.Key("eps")
    fbb.Float(opts.eps)
    fbb.Key("activation")
    fbb.String(opts.activation)
    fbb.Key("variance")
    fbb.String(opts.variance)
  return bytes(fbb.Finish())


def decode_options(data: bytes) -> RecalibOptions:
  """Parses custom_options with the rules of the C++ parser; ValueError if bad.

  Only the root map and its scalar/string values are read, so a hostile buffer
  cannot make this recurse.
  """
  data = bytes(data)
  if len(data) > MAX_OPTIONS_BYTES:
    raise ValueError(f"options larger than {MAX_OPTIONS_BYTES} bytes")
  try:
    root = flexbuffers.GetRoot(data)
    if not root.IsMap:
      raise ValueError("options must be a flexbuffer map")
    fmap = root.AsMap
    keys = [k.AsKey for k in fmap.Keys]
    values = list(fmap.Values)
  except ValueError:
    raise
  except Exception as e:  # Malformed bytes surface as many exception types.
    raise ValueError(f"malformed flexbuffer options: {type(e).__name__}") from e
  if len(keys) != len(values):
    raise ValueError("malformed flexbuffer options: key/value count mismatch")
  kwargs = {}
  for key, ref in zip(keys, values):
    if key not in _OPTION_KEYS:
      raise ValueError(f"unknown option key {key!r}")
    if key in kwargs:
      raise ValueError(f"duplicate option key {key!r}")
    try:
      if key in ("momentum", "eps"):
        if not ref.IsFloat:
          raise ValueError(f"option {key!r} must be a float")
        kwargs[key] = float(ref.AsFloat)
      elif key == "window":
        if not ref.IsInt:
          raise ValueError("option 'window' must be an integer")
        kwargs[key] = int(ref.AsInt)
      else:
        if not ref.IsString:
          raise ValueError(f"option {key!r} must be a string")
        kwargs[key] = ref.AsString
    except ValueError:
      raise
    except Exception as e:
      raise ValueError(
          f"malformed flexbuffer options: {type(e).__name__}") from e
  return RecalibOptions(**kwargs)


class RecalibState:
  """Per-channel state [mu_0..mu_{C-1}, var_0..var_{C-1}] (float32, SPEC layout).

  `data` is the contiguous buffer the C core updates in place; `mu` and `var`
  are views of it. `reset()` restores the clean targets (beta, gamma_abs^2).
  """

  def __init__(self, beta: np.ndarray, gamma_abs: np.ndarray):
    self.beta = np.ascontiguousarray(beta, dtype=np.float32)
    self.gamma_abs = np.ascontiguousarray(gamma_abs, dtype=np.float32)
    self.data = reference.reset_state(self.beta, self.gamma_abs)

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
    self.data[:] = reference.reset_state(self.beta, self.gamma_abs)

  def copy(self) -> "RecalibState":
    other = RecalibState.__new__(RecalibState)
    other.beta, other.gamma_abs = self.beta, self.gamma_abs
    other.data = self.data.copy()
    return other


def _check_x(x: np.ndarray, state: RecalibState) -> None:
  if not isinstance(x, np.ndarray) or x.dtype != np.int8:
    raise ValueError("x must be an int8 numpy array")
  if x.ndim < 2:
    raise ValueError("x must have a batch axis and a channel axis")
  if x.shape[-1] != state.channels:
    raise ValueError(
        f"x has {x.shape[-1]} channels, state has {state.channels}")


def _check_quant(quant: QuantParams) -> None:
  for name in ("s_x", "z_x", "s_y", "z_y"):
    if np.ndim(getattr(quant, name)) != 0:
      raise ValueError(f"per-channel quantization ({name} is an array) is not "
                       "supported: x and y must be per-tensor quantized")


def _check_mode(mode: str) -> None:
  if mode not in _MODE_CODES:
    raise ValueError(f"unknown mode {mode!r}")


def forge_recalib_reference(x: np.ndarray, state: RecalibState,
                            opts: RecalibOptions, quant: QuantParams,
                            mode: str = "adapt") -> np.ndarray:
  """Numpy reference: returns y (int8, shape of x) and updates `state`."""
  _check_x(x, state)
  _check_mode(mode)
  _check_quant(quant)
  q = reference.prepare_quant(opts.activation, quant.s_x, quant.z_x,
                              quant.s_y, quant.z_y)
  y, new_state = reference.recalib_step(
      x, state.beta, state.gamma_abs, state.data, use_window=opts.use_window,
      momentum=opts.momentum, window=opts.window, eps=opts.eps,
      variance=opts.variance, q=q, mode=mode)
  state.data[:] = new_state
  return y


def c_core_available() -> bool:
  try:
    from forge_tflm.ops import _forge_recalib_core  # noqa: F401
  except ImportError:
    return False
  return True


def _core():
  try:
    from forge_tflm.ops import _forge_recalib_core
  except ImportError as e:
    raise ImportError(
        "forge_tflm.ops._forge_recalib_core is not built; run "
        "`pip install -e . --no-build-isolation`") from e
  return _forge_recalib_core


# "default": forge_recalib_s8_x86 with the best loops this CPU has
# (c_core_variant()); "ansi": the plain C reference; "avx2": forge_recalib_s8_x86
# capped at AVX2 (so tests reach those loops on AVX-512 hosts too).
_VARIANT_CODES = {"default": 0, "ansi": 1, "avx2": 2}
# (x.shape, channels, opts, quant, mode, path) -> _c_args(...): repeated calls
# on one site (the evaluator: 21 sites x thousands of batches) skip the Python
# validation. Keys are immutable values, so an entry can never go stale.
_ARGS_CACHE: dict = {}
_ARGS_CACHE_MAX = 4096


def _c_args(x, state, opts, quant, mode, path):
  _check_x(x, state)
  _check_mode(mode)
  _check_quant(quant)
  if path not in _PATH_CODES:
    raise ValueError(f"unknown per-element path {path!r}")
  hw = int(np.prod(x.shape[1:-1], dtype=np.int64))
  return (int(x.shape[0]), hw, state.channels, int(opts.use_window),
          opts.momentum if opts.momentum is not None else 0.0,
          opts.window if opts.window is not None else 0, opts.eps,
          _ACT_CODES[opts.activation], _VAR_CODES[opts.variance],
          float(quant.s_x), int(quant.z_x), float(quant.s_y), int(quant.z_y),
          _MODE_CODES[mode], _PATH_CODES[path])


def _cached_c_args(x, state, opts, quant, mode, path):
  try:
    key = (x.shape, state.channels, opts, quant, mode, path)
    return _ARGS_CACHE[key]
  except KeyError:
    pass
  except TypeError:  # Unhashable field (e.g. an array in quant): validate.
    return _c_args(x, state, opts, quant, mode, path)
  args = _c_args(x, state, opts, quant, mode, path)
  if len(_ARGS_CACHE) >= _ARGS_CACHE_MAX:
    _ARGS_CACHE.clear()
  _ARGS_CACHE[key] = args
  return args


def c_core_variant() -> str:
  """Loops that `forge_recalib_c(variant="default")` runs on this machine:
  "x86_avx512" or "x86_avx2" (forge_recalib_s8_x86) or "ansi" (the plain C
  reference loops, e.g. off x86)."""
  return _core().DEFAULT_VARIANT


def forge_recalib_c(x: np.ndarray, state: RecalibState, opts: RecalibOptions,
                    quant: QuantParams, mode: str = "adapt",
                    out: np.ndarray | None = None,
                    path: str = "auto", variant: str = "default") -> np.ndarray:
  """C core on numpy buffers (no copies): returns y and updates `state`.

  `out` (int8, C-contiguous, shape of x; may be x itself) receives y; passing
  a preallocated one saves an allocation per call. `path` forces the
  per-element pass ("affine" or "lut"); `variant` "ansi" forces the plain C
  function instead of the host's optimized one (c_core_variant()), "avx2" caps
  that one at AVX2; results are identical. Errors raise ValueError with the C core's message.
  """
  core = _core()
  if not isinstance(x, np.ndarray) or x.dtype != np.int8:
    raise ValueError("x must be an int8 numpy array")
  if not x.flags.c_contiguous:
    raise ValueError("x must be C-contiguous")
  if variant not in _VARIANT_CODES:
    raise ValueError(f"unknown variant {variant!r}")
  args = _cached_c_args(x, state, opts, quant, mode, path)
  if out is None:
    out = np.empty_like(x)
  elif out.shape != x.shape:
    raise ValueError("out must have the shape of x")
  core.s8(x, out, state.beta, state.gamma_abs, state.data, *args,
          _VARIANT_CODES[variant])
  return out


def bench_c(x: np.ndarray, state: RecalibState, opts: RecalibOptions,
            quant: QuantParams, reps: int, mode: str = "adapt",
            path: str = "auto", variant: str = "default") -> float:
  """Runs the C core `reps` times in C; returns nanoseconds per call."""
  if variant not in _VARIANT_CODES:
    raise ValueError(f"unknown variant {variant!r}")
  out = np.empty_like(x)
  total_ns = _core().bench_s8(x, out, state.beta, state.gamma_abs, state.data,
                              *_c_args(x, state, opts, quant, mode, path),
                              int(reps), _VARIANT_CODES[variant])
  return total_ns / reps


def bench_memcpy(nbytes: int, reps: int) -> float:
  """memcpy of `nbytes` timed in C (same loop harness); ns per copy."""
  src = np.ones(nbytes, dtype=np.int8)
  dst = np.empty_like(src)
  return _core().bench_memcpy(dst, src, int(reps)) / reps
