"""C core == numpy reference, bit for bit (outputs and state), on >= 10,000 streams.

Both per-element paths of the C core (affine and 256-entry LUT) are checked
against the reference from identical states; a stream carries the state over
several steps. Most cases are small so the whole file takes seconds.
"""

import time

import numpy as np
import pytest

from forge_tflm import ops
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


def _run_stream(case) -> int:
  ref = ops.RecalibState(case.beta, case.gamma_abs)
  affine, lut = ref.copy(), ref.copy()
  for step, (x, mode) in enumerate(zip(case.batches, case.modes)):
    y_ref = ops.forge_recalib_reference(x, ref, case.opts, case.quant, mode)
    y_aff = ops.forge_recalib_c(x, affine, case.opts, case.quant, mode,
                                path="affine")
    y_lut = ops.forge_recalib_c(x, lut, case.opts, case.quant, mode, path="lut")
    where = f"step {step} of {case.opts} {case.quant} shape {x.shape} {mode}"
    np.testing.assert_array_equal(y_aff, y_ref, err_msg=where)
    np.testing.assert_array_equal(y_lut, y_ref, err_msg=where)
    np.testing.assert_array_equal(_bits(affine.data), _bits(ref.data),
                                  err_msg=where)
    np.testing.assert_array_equal(_bits(lut.data), _bits(ref.data),
                                  err_msg=where)
    # SPEC bounds on scales/targets keep the state finite (no NaN poisoning).
    assert np.all(np.isfinite(ref.data)), where
  return len(case.batches)


def test_parity_randomized_small_streams():
  rng = np.random.default_rng(20240611)
  start, steps = time.perf_counter(), 0
  for _ in range(N_SMALL_STREAMS):
    steps += _run_stream(cases.random_case(rng))
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
