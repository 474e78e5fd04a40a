"""C core == numpy reference, bit for bit (outputs and state), on >= 10,000 streams.

Both per-element paths of the C core (affine and 256-entry LUT) are checked
against the reference from identical states; a stream carries the state over
several steps. `forge_recalib_c` runs the variant the binding uses by default
(forge_recalib_s8_x86 with the best loops of this CPU, see
ops.c_core_variant()); the plain forge_recalib_s8_ansi and the AVX2-capped
variant are checked too, against the reference and directly against each
other over every channel-count class of the x86 loops. Most cases are small
so the whole file takes seconds.
"""

import time

import numpy as np
import pytest

from forge_tflm import ops
from forge_tflm.ops import options
from tests.ops import cases

pytestmark = pytest.mark.skipif(not ops.c_core_available(),
                                reason="C core not built (pip install -e .)")

N_SMALL_STREAMS = 10_000
# (N, H, W, C): the largest tensors of the spec's ranges, ResNet-20 sizes, and
# the int32 block boundary of sum(q*q) (65536 rows) and M = 2^22.
_BIG_SHAPES = [(64, 32, 32, 16), (64, 16, 16, 32), (64, 8, 8, 64),
               (16, 8, 8, 256), (1, 32, 32, 256), (65, 32, 32, 1),
               (64, 32, 32, 3), (4096, 32, 32, 1)]


def _bits(a):
  return np.ascontiguousarray(a).view(np.uint32)


# (path, variant) runs compared with the reference in every stream.
_RUNS = [("affine", "default"), ("lut", "default"), ("affine", "ansi")]


def _run_stream(case, runs=_RUNS) -> int:
  ref = ops.RecalibState(case.beta, case.gamma_abs)
  states = [ref.copy() for _ in runs]
  for step, (x, mode) in enumerate(zip(case.batches, case.modes)):
    y_ref = ops.forge_recalib_reference(x, ref, case.opts, case.quant, mode)
    for (path, variant), state in zip(runs, states):
      y = ops.forge_recalib_c(x, state, case.opts, case.quant, mode, path=path,
                              variant=variant)
      where = (f"{path}/{variant} step {step} of {case.opts} {case.quant} "
               f"shape {x.shape} {mode}")
      np.testing.assert_array_equal(y, y_ref, err_msg=where)
      np.testing.assert_array_equal(_bits(state.data), _bits(ref.data),
                                    err_msg=where)
    # SPEC bounds on scales/targets keep the state finite (no NaN poisoning).
    assert np.all(np.isfinite(ref.data)), where
  return len(case.batches)


def test_parity_randomized_small_streams():
  rng = np.random.default_rng(20240611)
  start, steps = time.perf_counter(), 0
  for _ in range(N_SMALL_STREAMS):
    steps += _run_stream(cases.random_case(rng))
  assert steps >= N_SMALL_STREAMS  # every stream ran at least one compared batch
  print(f"{N_SMALL_STREAMS} streams, {steps} steps in "
        f"{time.perf_counter() - start:.1f} s")
  assert steps >= N_SMALL_STREAMS


@pytest.mark.parametrize("shape", _BIG_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_parity_big_tensors(shape):
  rng = np.random.default_rng(sum(shape))
  _run_stream(cases.random_case(rng, shape=shape, steps=2))


def test_parity_auto_path_and_in_place():
  rng = np.random.default_rng(7)
  # Small and large M: whichever path this build's "auto" picks.
  for shape in [(2, 3, 3, 5), (64, 8, 8, 64)]:
    case = cases.random_case(rng, shape=shape, steps=3)
    ref = ops.RecalibState(case.beta, case.gamma_abs)
    auto = ref.copy()
    for x in case.batches:
      y_ref = ops.forge_recalib_reference(x, ref, case.opts, case.quant)
      x_inplace = x.copy()
      ops.forge_recalib_c(x_inplace, auto, case.opts, case.quant, out=x_inplace)
      np.testing.assert_array_equal(x_inplace, y_ref)
      np.testing.assert_array_equal(_bits(auto.data), _bits(ref.data))


def test_binding_default_is_the_host_variant():
  # What the binding runs by default is what the tests above checked.
  core = options.core()
  assert ops.c_core_variant() == core.DEFAULT_VARIANT
  assert ops.c_core_variant() in ("x86_avx512", "x86_avx2", "ansi")
  with pytest.raises(ValueError, match="variant"):
    ops.forge_recalib_c(np.zeros((1, 2), np.int8), ops.RecalibState(
        np.zeros(2, np.float32), np.ones(2, np.float32)),
                        ops.RecalibOptions(momentum=0.1),
                        ops.QuantParams(0.1, 0, 0.1, 0), variant="sse")


# Channel counts for every kind of x86 loop: multiples of the vector width
# (lanes = channels), divisors of it, other C with lcm(C, width) <= 2048 (per
# lane coefficient/sum arrays), and C whose period is too long (ansi loops).
_VARIANT_CHANNELS = (list(range(1, 70)) +
                     [96, 100, 127, 128, 160, 192, 255, 256, 1000, 1024, 1056])


@pytest.mark.parametrize("c", _VARIANT_CHANNELS)
def test_x86_variants_equal_ansi(c):
  """forge_recalib_s8_x86 (default and AVX2-capped) == forge_recalib_s8_ansi,
  outputs and state, with row counts that leave a scalar tail or not, adapt
  and frozen, in place too."""
  rng = np.random.default_rng(1000 + c)
  for trial in range(6):
    n = int(rng.integers(1, 9))
    h, w = (int(v) for v in rng.integers(1, 12, size=2))
    if trial == 0:
      n, h, w = 64, 1, 1  # 64 rows: whole periods for every c.
    case = cases.random_case(rng, shape=(n, h, w, c), steps=3)
    variants = ("ansi", "default", "avx2")
    states = {v: ops.RecalibState(case.beta, case.gamma_abs) for v in variants}
    for step, (x, mode) in enumerate(zip(case.batches, case.modes)):
      ys = {}
      for v in variants:
        y = x.copy() if v == "avx2" else None  # In place for one of them.
        ys[v] = ops.forge_recalib_c(y if y is not None else x, states[v],
                                    case.opts, case.quant, mode, path="affine",
                                    variant=v, out=y)
      for v in variants[1:]:
        where = f"{v} c={c} trial {trial} step {step} {x.shape} {mode}"
        np.testing.assert_array_equal(ys[v], ys["ansi"], err_msg=where)
        np.testing.assert_array_equal(_bits(states[v].data),
                                      _bits(states["ansi"].data), err_msg=where)


def test_x86_affine_edge_values_equal_ansi():
  """Coefficients that overflow (A = inf, B = +-inf, NaN products) and values
  landing exactly on the clamp bounds and rounding ties, every int8 input."""
  q = np.arange(-128, 128, dtype=np.int8)
  x = np.ascontiguousarray(np.tile(q[:, None], (1, 32)))  # [256, 32]
  rng = np.random.default_rng(5)
  opts_list = [ops.RecalibOptions(momentum=0.0, eps=1e-45, activation=a)
               for a in ("none", "relu", "relu6")]
  for opts in opts_list:
    for _ in range(20):
      beta = rng.choice([0.0, 2.0**40, -2.0**40, 0.5, -0.5, 1e-30], size=32)
      gamma = rng.choice([0.0, 2.0**40, 1.0, 1e-30], size=32)
      quant = ops.QuantParams(float(rng.choice([2.0**-40, 1.0, 2.0**40])),
                              int(rng.integers(-128, 128)),
                              float(rng.choice([2.0**-40, 1.0, 0.5, 2.0**40])),
                              int(rng.integers(-128, 128)))
      base = ops.RecalibState(beta.astype(np.float32), gamma.astype(np.float32))
      base.data[32:] = rng.choice([0.0, 1.0, 2.0**80], size=32)  # var
      ys = {}
      for v in ("ansi", "default", "avx2"):
        st = base.copy()
        ys[v] = ops.forge_recalib_c(x, st, opts, quant, "frozen", path="affine",
                                    variant=v)
      ref = ops.forge_recalib_reference(x, base.copy(), opts, quant, "frozen")
      for v in ys:
        np.testing.assert_array_equal(ys[v], ref, err_msg=f"{v} {opts} {quant}")


@pytest.mark.parametrize("mode", ["adapt", "frozen"])
def test_unusable_state_is_repaired_identically(mode):
  """Issue 20: a NaN/inf mean or a NaN/inf/negative variance pinned the channel's
  output at qmin forever. SPEC "Repair": such a channel restarts from its targets,
  the others are untouched; C and numpy agree bit for bit."""
  rng = np.random.default_rng(7)
  c = 6
  beta = rng.normal(size=c).astype(np.float32)
  gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
  x = rng.integers(-128, 128, (2, 4, 4, c)).astype(np.int8)
  opts = ops.RecalibOptions(momentum=0.25)
  q = ops.QuantParams(0.05, 3, 0.04, -5)
  good = rng.normal(size=2 * c).astype(np.float32) ** 2  # Usable, not the clean state.
  outs = {}
  for fn in (ops.forge_recalib_reference, ops.forge_recalib_c):
    state = ops.RecalibState(beta, gamma)
    state.data[:] = good
    state.data[[0, c + 1, c + 2, 3]] = [np.nan, np.inf, -1.0, -np.inf]
    y = fn(x, state, opts, q, mode=mode)
    outs[fn.__name__] = (y, state.data.copy())
    assert np.isfinite(state.data).all() and (state.data[c:] >= 0).all()
    # Channels 4 and 5 were usable: the same as from an untouched state.
    ref = ops.RecalibState(beta, gamma)
    ref.data[:] = good
    y_good = ops.forge_recalib_reference(x, ref, opts, q, mode=mode)
    np.testing.assert_array_equal(y[..., 4:], y_good[..., 4:])
  (ya, sa), (yb, sb) = outs.values()
  np.testing.assert_array_equal(ya, yb)
  assert sa.tobytes() == sb.tobytes()


def test_source_mode_is_a_reset_then_frozen_and_leaves_the_state_alone():
  """SOURCE (the gate's probe pass) normalizes with the clean targets: the same bits
  as resetting and running frozen, in C and numpy, while the adapted state (even an
  unusable one: source mode does not read it) stays exactly as it was."""
  rng = np.random.default_rng(11)
  for trial in range(20):
    case = cases.random_case(rng, steps=3)
    x = case.batches[0]
    state = ops.RecalibState(case.beta, case.gamma_abs)
    for xb in case.batches:
      ops.forge_recalib_c(xb, state, case.opts, case.quant, "adapt")
    if trial % 4 == 0:
      state.data[0] = np.nan
    before = state.data.tobytes()
    clean = ops.RecalibState(case.beta, case.gamma_abs)
    want = ops.forge_recalib_reference(x, clean, case.opts, case.quant, "frozen")
    for fn in (ops.forge_recalib_c, ops.forge_recalib_reference):
      got = fn(x, state, case.opts, case.quant, "source")
      np.testing.assert_array_equal(got, want, err_msg=f"{fn.__name__} trial {trial}")
      assert state.data.tobytes() == before


def test_adapt_safe_adapts_label_safe_ops_and_runs_the_others_in_source_mode():
  """Mode adapt_safe (the field controller's, while labels look correlated) is adapt
  for an op with option label_safe and source for the others: the same bits and state,
  in C (forge_recalib_mode_for) and numpy."""
  rng = np.random.default_rng(12)
  for trial in range(12):
    case = cases.random_case(rng, steps=3)
    for safe in (1, None):
      opts = case.opts.replace(label_safe=safe) if safe else case.opts
      want_mode = "adapt" if safe else "source"
      for fn in (ops.forge_recalib_c, ops.forge_recalib_reference):
        got_state = ops.RecalibState(case.beta, case.gamma_abs)
        want_state = ops.RecalibState(case.beta, case.gamma_abs)
        for xb in case.batches:
          got = fn(xb, got_state, opts, case.quant, "adapt_safe")
          want = fn(xb, want_state, opts, case.quant, want_mode)
          np.testing.assert_array_equal(got, want, err_msg=f"{fn.__name__} {trial}")
        assert got_state.data.tobytes() == want_state.data.tobytes()


def test_bench_resolves_adapt_safe_as_a_call_does():
  """RecalibOp.bench passed adapt_safe to the core unresolved, which refused it as an
  unknown mode; it times what a call in that mode runs."""
  case = cases.random_case(np.random.default_rng(3), steps=1)
  for safe in (1, None):
    op = ops.RecalibOp(case.opts.replace(label_safe=safe) if safe else case.opts,
                       case.quant, case.beta, case.gamma_abs)
    assert op.bench(case.batches[0], 2, mode="adapt_safe") > 0


def test_label_safe_is_an_option_bit():
  assert ops.RecalibOptions(window=8, label_safe=1).label_safe == 1
  assert ops.RecalibOptions(window=8, label_safe=0).label_safe is None  # The C default.
  with pytest.raises(ValueError, match="label_safe must be 0 or 1"):
    ops.RecalibOptions(window=8, label_safe=2)
  opts = ops.RecalibOptions(window=8, label_safe=1)
  assert ops.decode_options(ops.encode_options(opts)) == opts


@pytest.mark.parametrize("key", ["classes", "class_margin"])
def test_the_removed_class_options_are_unknown(key):
  """Class-balanced statistics left the op (docs/decisions/class-balanced-statistics.md):
  their options are unknown keys to the Python decoder and the dataclass alike."""
  import flatbuffers.flexbuffers as flexbuffers

  raw = bytes(flexbuffers.Dumps({"window": 8, key: 3}))
  with pytest.raises(ValueError, match="unknown"):
    ops.decode_options(raw)
  with pytest.raises(TypeError):
    ops.RecalibOptions(window=8, **{key: 3})
