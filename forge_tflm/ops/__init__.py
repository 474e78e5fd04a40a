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
    "forge_recalib_reference", "forge_recalib_reference_commit", "class_labels_s8",
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
               offsets: np.ndarray | None = None, int_scale: float | None = None):
    self.beta = np.ascontiguousarray(beta, dtype=np.float32)
    self.gamma_abs = np.ascontiguousarray(gamma_abs, dtype=np.float32)
    self.int_scale = None if int_scale is None else np.float32(int_scale)
    if self.int_scale is not None and offsets is not None:
      raise ValueError("arithmetic int does not support classes")
    self.data = self._clean()
    # Class-balanced statistics (SPEC "Class-balanced statistics"): the class offsets
    # [K, C] (constants), the class state block (the C core's layout, one buffer) with
    # its view `classes` [2, K, C], and the moments of the last adapting invocation's
    # images waiting for their labels ([2, N, C], None when committed). `data` stays
    # the label-blind statistics.
    self.offsets = None if offsets is None else np.ascontiguousarray(offsets, np.float32)
    self.block = self.classes = None
    self.pending = None
    if self.offsets is not None:
      self._set_block(reference.classes_reset(self.beta, self.gamma_abs, self.offsets))

  def _clean(self) -> np.ndarray:
    if self.int_scale is not None:
      return reference.int_reset_state(self.beta, self.gamma_abs, self.int_scale)
    return reference.reset_state(self.beta, self.gamma_abs)

  @property
  def integer(self) -> bool:
    return self.int_scale is not None

  def _set_block(self, block: np.ndarray) -> None:
    self.block = block
    self.classes = reference.class_views(block, self.offsets.shape[0], self.channels)

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
    if self.offsets is not None:
      self.block[:] = reference.classes_reset(self.beta, self.gamma_abs, self.offsets)
      self.pending = None

  @property
  def nbytes(self) -> int:
    """SRAM bytes of the state (pending moments excluded: they scale with the batch)."""
    return self.data.nbytes + (0 if self.block is None else self.block.nbytes)

  def copy(self) -> "RecalibState":
    other = RecalibState.__new__(RecalibState)
    other.beta, other.gamma_abs, other.offsets = self.beta, self.gamma_abs, self.offsets
    other.int_scale = self.int_scale
    other.data = self.data.copy()
    other.block = other.classes = None
    if self.block is not None:
      other._set_block(self.block.copy())
    other.pending = None if self.pending is None else self.pending.copy()
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
  if mode == "adapt_safe" and (opts.label_safe or opts.classes is None):  # SPEC "Modes"
    mode = "adapt" if opts.label_safe else "source"
  _check_classes(opts, state)
  q = reference.prepare_quant(opts.activation, quant.s_x, quant.z_x,
                              quant.s_y, quant.z_y)
  if opts.classes is not None and mode in ("adapt", "adapt_safe"):
    pending = reference.image_moments(x, q)  # Until the labels (SPEC "Commit").
  if mode == "adapt_safe":  # SPEC "Class-balanced statistics": the class mixture.
    state.block[:], mixture = reference.classes_mixture(
        state.beta, state.gamma_abs, state.offsets, state.block)
    y, _ = reference.recalib_step(x, state.beta, state.gamma_abs, mixture, opts=opts,
                                  q=q, mode="frozen")
    state.pending = pending
    return y
  step = reference.int_recalib_step if opts.integer else reference.recalib_step
  y, new_state = step(x, state.beta, state.gamma_abs, state.data, opts=opts, q=q,
                      mode=mode)
  state.data[:] = new_state
  if opts.classes is not None and mode == "adapt":
    state.pending = pending
  return y


def forge_recalib_reference_commit(labels, state: RecalibState,
                                   opts: RecalibOptions) -> None:
  """Numpy reference of the deferred class update: the last adapting invocation's
  images enter their labelled classes (-1: not at all); a no-op without pending
  images."""
  _check_classes(opts, state)
  if opts.classes is None:
    raise ValueError("class commit without the classes option")
  if state.pending is None:
    return
  _check_labels(labels, state.pending.shape[1])
  state.block[:] = reference.classes_commit(state.block, state.pending, labels, opts)
  state.pending = None


def _check_classes(opts: RecalibOptions, state: RecalibState) -> None:
  if opts.integer != state.integer:
    raise ValueError(f"options say arithmetic={opts.arithmetic or 'float'}, the state"
                     f" is {'int32' if state.integer else 'float32'}")
  k = None if state.offsets is None else state.offsets.shape[0]
  if opts.classes != k:
    raise ValueError(f"options say classes={opts.classes}, the state has "
                     f"{'no class offsets' if k is None else f'{k} classes'}")


def _check_labels(labels, n: int) -> np.ndarray:
  labels = np.ascontiguousarray(labels, np.int32)
  if labels.shape != (n,):
    raise ValueError(f"{labels.shape} labels for {n} pending images")
  return labels


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
               gamma_abs: np.ndarray, state: RecalibState | None = None,
               offsets: np.ndarray | None = None):
    self.options = options
    self.quant = quant
    if state is None:
      state = RecalibState(beta, gamma_abs, offsets,
                           int_scale=quant.s_x if options.integer else None)
    self.state = state
    _check_classes(options, self.state)
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
                     state=self.state if same else None, offsets=self.state.offsets)

  @property
  def class_balanced(self) -> bool:
    return self.options.classes is not None

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
    st = self.state
    pending = None
    if self.class_balanced and mode in ("adapt", "adapt_safe"):
      # SPEC "Class-balanced statistics": the images wait with their moments for their
      # labels; adapt_safe normalizes with the class mixture (frozen), adapt and
      # frozen with the label-blind `data` like the plain op.
      pending = np.empty((2,) + (x.shape[0], x.shape[-1]), np.float32)
      self._prepared.image_moments(x, pending)  # Before y may overwrite x.
    stats = st.data
    if mode == "adapt_safe":
      stats = np.empty_like(st.data)
      core().classes_mixture(st.beta, st.gamma_abs, st.offsets, st.block, stats)
      code = _MODE_CODES["frozen"]
    self._prepared.run(x, out, stats, code,
                       _code(_PATH_CODES, path, "per-element path"),
                       _code(_VARIANT_CODES, variant, "variant"))
    if pending is not None:
      st.pending = pending
    return out

  def commit(self, labels) -> None:
    """The deferred class update (SPEC "Commit"): the last adapt invocation's images
    enter their labelled classes (int, [0, K) or -1 to skip); then nothing is pending.
    A no-op when nothing is pending."""
    if not self.class_balanced:
      raise ValueError("commit needs the classes option")
    if self.state.pending is None:
      return
    labels = _check_labels(labels, self.state.pending.shape[1])
    self._prepared.classes_commit(self.state.pending, labels, self.state.block)
    self.state.pending = None

  def commit_output(self, logits) -> None:
    """commit with the labels the op takes from the model's int8 output [N, K] (SPEC
    "Labels": the argmax when it leads by the option class_margin, else none), as
    the TFLM kernel does for ForgeRecalibControl::CommitOutput."""
    if not self.class_balanced:
      raise ValueError("commit needs the classes option")
    if self.state.pending is None:
      return
    logits = np.ascontiguousarray(logits, np.int8)
    n = self.state.pending.shape[1]
    if logits.shape != (n, self.options.classes):
      raise ValueError(f"logits must be int8 [{n}, {self.options.classes}] (one row per"
                       f" pending image, K = classes), got {logits.shape}")
    self._prepared.classes_commit_s8(self.state.pending, logits, self.state.block)
    self.state.pending = None

  def reference_commit(self, labels) -> None:
    """The numpy definition of commit on the same state (tests)."""
    forge_recalib_reference_commit(labels, self.state, self.options)

  def reference_commit_output(self, logits) -> None:
    """The numpy definition of commit_output on the same state (tests)."""
    forge_recalib_reference_commit(
        reference.class_labels_s8(logits, self.options.class_margin or 0), self.state,
        self.options)

  def reference(self, x: np.ndarray, mode: str = "adapt") -> np.ndarray:
    """The numpy definition on the same state (tests)."""
    return forge_recalib_reference(x, self.state, self.options, self.quant, mode)

  def bench(self, x: np.ndarray, reps: int, mode: str = "adapt", path: str = "auto",
            variant: str = "default") -> float:
    """Runs the C core `reps` times in C; returns nanoseconds per call."""
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


def class_labels_s8(logits: np.ndarray, margin: int = 0) -> np.ndarray:
  """The C core's label of each row of int8 logits [N, K] (SPEC "Labels"): the
  argmax (lowest index on ties) when it leads by at least `margin`, else -1."""
  return np.asarray(core().class_labels_s8(np.ascontiguousarray(logits, np.int8),
                                           int(margin)), np.int32)
