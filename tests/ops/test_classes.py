"""Class-balanced statistics (option `classes`, SPEC "Class-balanced statistics"):
the C core against the numpy reference, bit for bit, outputs, class state and pending
moments, over randomized streams with deferred commits, every host variant and path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from forge_tflm import ops
from forge_tflm.ops import reference
from tests.ops import cases


def _bits(a):
  return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _class_case(rng, steps=6):
  """A random op case (cases.random_case) with K classes and offsets around its
  targets, window-rate options (momentum also drawn), both variance estimators, label
  safe or not, and adapt_safe (the class mixture, or label-blind) among the modes."""
  case = cases.random_case(rng, steps=steps)
  k = int(rng.choice([2, 3, 10, 17]))
  c = case.beta.shape[0]
  spread = np.where(case.gamma_abs > 0, case.gamma_abs, 1.0)
  offsets = (rng.normal(0, 1, (k, c)) * spread * rng.uniform(0, 2)).astype(np.float32)
  offsets = np.clip(offsets, -2.0**40, 2.0**40).astype(np.float32)
  opts = dataclasses.replace(case.opts, classes=k, label_safe=rng.choice([None, 1]))
  modes = [m if rng.integers(3) else "adapt_safe" for m in case.modes]
  return dataclasses.replace(case, modes=modes), opts, offsets


_RUNS = [("affine", "default"), ("lut", "default"), ("affine", "ansi"),
         ("affine", "avx2")]


@pytest.mark.parametrize("seed", range(4))
def test_class_balanced_streams_match_the_reference_bit_for_bit(seed):
  rng = np.random.default_rng([2611, seed])
  for trial in range(40):
    case, opts, offsets = _class_case(rng)
    ref = ops.RecalibState(case.beta, case.gamma_abs, offsets)
    nodes = [ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
             for _ in _RUNS]
    for step, (x, mode) in enumerate(zip(case.batches, case.modes)):
      y_ref = ops.forge_recalib_reference(x, ref, opts, case.quant, mode)
      for (path, variant), node in zip(_RUNS, nodes):
        where = f"trial {trial} step {step} {mode} {path}/{variant} {opts} {case.quant}"
        y = node(x, mode, path=path, variant=variant)
        np.testing.assert_array_equal(y, y_ref, err_msg=where)
        np.testing.assert_array_equal(_bits(node.state.data), _bits(ref.data), where)
        np.testing.assert_array_equal(_bits(node.state.block), _bits(ref.block),
                                      where)
        assert (node.state.pending is None) == (ref.pending is None), where
        if ref.pending is not None:
          np.testing.assert_array_equal(_bits(node.state.pending), _bits(ref.pending),
                                        where)
      if rng.integers(4):  # Sometimes no commit: the next adapt call replaces them.
        labels = rng.integers(-1, opts.classes, len(x)).astype(np.int32)
        ops.forge_recalib_reference_commit(labels, ref, opts)
        for node in nodes:
          node.commit(labels)
          np.testing.assert_array_equal(_bits(node.state.block), _bits(ref.block),
                                        f"trial {trial} commit {step}")
          assert node.state.pending is None
      assert np.all(np.isfinite(ref.block))


def test_reset_state_is_the_clean_targets_up_to_rounding():
  """An unshifted stream is (nearly) a no-op: the mixture of the reset class state
  is (beta, gamma^2) up to float32 rounding when the within-class floor is not hit."""
  rng = np.random.default_rng(3)
  c, k = 32, 10
  beta = rng.normal(0, 1, c).astype(np.float32)
  gamma = rng.uniform(0.5, 2, c).astype(np.float32)
  offsets = rng.normal(0, 0.3, (k, c)).astype(np.float32)
  offsets -= offsets.mean(0, dtype=np.float32)
  state = ops.RecalibState(beta, gamma, offsets)
  cs, mix = reference.classes_mixture(beta, gamma, offsets, state.block)
  np.testing.assert_allclose(mix[:c], beta, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(mix[c:], gamma * gamma, rtol=1e-5)
  c_state = np.empty(reference.class_floats(c, k), np.float32)
  ops.core().classes_reset(beta, gamma, offsets, c_state)
  assert c_state.tobytes() == state.block.tobytes()


def test_unusable_class_channels_are_repaired_identically():
  rng = np.random.default_rng(5)
  case, opts, offsets = _class_case(rng, steps=1)
  opts = dataclasses.replace(opts, label_safe=None)  # adapt_safe reads the mixture.
  x = case.batches[0]
  outs = []
  for fn in ("c", "reference"):
    node = ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
    node.state.classes[0, 0, 0] = np.nan
    node.state.classes[1, 1, -1] = -1.0
    # The class state is read (and repaired) where the mixture is made.
    y = node(x, "adapt_safe") if fn == "c" else node.reference(x, "adapt_safe")
    assert np.isfinite(node.state.classes).all() and (node.state.classes[1] >= 0).all()
    outs.append((y, node.state.classes.tobytes(), node.state.data.tobytes()))
  assert outs[0][1:] == outs[1][1:]
  np.testing.assert_array_equal(outs[0][0], outs[1][0])


def test_source_and_frozen_leave_the_class_state_and_pending_alone():
  rng = np.random.default_rng(9)
  case, opts, offsets = _class_case(rng, steps=1)
  x = case.batches[0]
  node = ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
  node(x, "adapt")
  pending, classes = node.state.pending.copy(), node.state.classes.copy()
  clean = ops.RecalibOp(case.opts, case.quant, case.beta, case.gamma_abs)
  np.testing.assert_array_equal(node(x, "source"), clean(x, "source"))
  node(x, "frozen")
  assert node.state.pending.tobytes() == pending.tobytes()
  assert node.state.classes.tobytes() == classes.tobytes()


def test_commit_moves_only_the_labelled_class_at_the_class_rate():
  c, k = 4, 5
  beta = np.zeros(c, np.float32)
  gamma = np.ones(c, np.float32)
  offsets = np.zeros((k, c), np.float32)
  opts = ops.RecalibOptions(window=50, classes=k)  # Rate K / W = 0.1 per image.
  q = ops.QuantParams(1.0, 0, 1.0, 0)
  node = ops.RecalibOp(opts, q, beta, gamma, offsets=offsets)
  x = np.full((1, 2, 2, c), 10, np.int8)
  node(x, "adapt")
  before = node.state.classes.copy()
  node.commit([3])
  moved = np.flatnonzero((node.state.classes != before).any(axis=(0, 2)))
  assert moved.tolist() == [3]
  np.testing.assert_allclose(node.state.classes[0, 3], 1.0, rtol=1e-6)  # 0.9*0 + 0.1*10
  node.commit([0])  # Nothing pending any more: a no-op.
  assert node.state.classes[0, 0].tolist() == [0.0] * c


def test_errors_are_one_line_and_write_nothing():
  rng = np.random.default_rng(1)
  case, opts, offsets = _class_case(rng, steps=1)
  x = case.batches[0]
  node = ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
  node(x, "adapt")
  classes = node.state.classes.tobytes()
  with pytest.raises(ValueError, match=r"label must be a class in \[0, K\) or -1"):
    node.commit(np.full(len(x), opts.classes, np.int32))
  with pytest.raises(ValueError, match="labels for"):
    node.commit(np.zeros(len(x) + 1, np.int32))
  assert node.state.classes.tobytes() == classes and node.state.pending is not None
  with pytest.raises(ValueError, match="classes=None, the state has"):
    ops.RecalibOp(case.opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
  with pytest.raises(ValueError, match="no class offsets"):
    ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs)
  with pytest.raises(ValueError, match="commit needs the classes option"):
    ops.RecalibOp(case.opts, case.quant, case.beta, case.gamma_abs).commit([0])
  bad = offsets.copy()
  bad[0, 0] = np.nan
  with pytest.raises(ValueError, match="class offsets must be finite"):
    ops.RecalibState(case.beta, case.gamma_abs, bad)
  with pytest.raises(ValueError, match="class offsets must be finite"):
    ops.core().classes_reset(case.beta, case.gamma_abs, bad,
                             np.empty(reference.class_floats(bad.shape[1], bad.shape[0]),
                                      np.float32))


@pytest.mark.parametrize("classes", [1, 257, -1, True, 2.0])
def test_classes_option_range(classes):
  with pytest.raises(ValueError, match="classes must be"):
    ops.RecalibOptions(window=640, classes=classes)


def test_classes_option_round_trips_and_off_is_not_written():
  opts = ops.RecalibOptions(window=640, classes=10)
  assert ops.decode_options(ops.encode_options(opts)) == opts
  off = ops.RecalibOptions(window=640, classes=0)
  assert off.classes is None and b"classes" not in ops.encode_options(off)
  assert "classes" not in off.to_json()


def test_labels_are_the_argmax_lowest_index_on_ties_when_it_leads_by_the_margin():
  logits = np.array([[3, 7, 7, -1], [-128, -128, -128, -128], [0, 1, 2, 127],
                     [-128, 127, -128, -128], [10, 30, 29, 0]], np.int8)
  for margin, want in ((0, [1, 0, 3, 1, 1]), (1, [-1, -1, 3, 1, 1]),
                       (2, [-1, -1, 3, 1, -1]), (125, [-1, -1, 3, 1, -1]),
                       (255, [-1, -1, -1, 1, -1])):
    assert ops.class_labels_s8(logits, margin).tolist() == want, margin
    assert reference.class_labels_s8(logits, margin).tolist() == want, margin


@pytest.mark.parametrize("seed", range(2))
def test_commits_from_the_output_match_the_reference_bit_for_bit(seed):
  """commit_output: the op takes each image's label from the int8 logits with its
  class_margin (SPEC "Labels"), in C as in numpy."""
  rng = np.random.default_rng([2612, seed])
  for trial in range(30):
    case, opts, offsets = _class_case(rng)
    opts = dataclasses.replace(opts, class_margin=int(rng.choice([0, 1, 20, 100])))
    ref = ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
    node = ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
    for step, (x, mode) in enumerate(zip(case.batches, case.modes)):
      where = f"trial {trial} step {step} {mode} {opts}"
      np.testing.assert_array_equal(node(x, mode), ref.reference(x, mode), where)
      logits = rng.integers(-128, 128, (len(x), opts.classes)).astype(np.int8)
      logits[rng.random(len(x)) < 0.5, 0] = 127  # Some confident rows.
      node.commit_output(logits)
      ref.reference_commit_output(logits)
      np.testing.assert_array_equal(_bits(node.state.block), _bits(ref.state.block),
                                    where)
      assert node.state.pending is None and ref.state.pending is None


def test_class_margin_needs_classes_and_stays_in_range():
  assert ops.RecalibOptions(window=64, classes=10, class_margin=0).class_margin is None
  opts = ops.RecalibOptions(window=64, classes=10, class_margin=100)
  assert ops.decode_options(ops.encode_options(opts)) == opts
  for bad, match in (({"class_margin": 5}, "needs classes"),
                     ({"classes": 10, "class_margin": 256}, r"\[0, 255\]"),
                     ({"classes": 10, "class_margin": -1}, r"\[0, 255\]"),
                     ({"classes": 10, "class_margin": 1.5}, "integer")):
    with pytest.raises(ValueError, match=match):
      ops.RecalibOptions(window=64, **bad)


def _mixed_node(k=4):
  rng = np.random.default_rng(7)
  beta, gamma = np.zeros(3, np.float32), np.ones(3, np.float32)
  offsets = rng.normal(0, 0.5, (k, 3)).astype(np.float32)
  opts = ops.RecalibOptions(window=32, classes=k)
  return ops.RecalibOp(opts, ops.QuantParams(0.05, 0, 0.05, 0), beta, gamma,
                       offsets=offsets)


def test_adapt_is_the_plain_op_bit_for_bit_and_the_class_state_still_learns():
  """SPEC "Class-balanced statistics": in adapt mode the op is the label-blind op (same
  outputs, same [mu, var]) on any batch size, while commits move the class state."""
  rng = np.random.default_rng(11)
  node = _mixed_node()
  plain = ops.RecalibOp(ops.RecalibOptions(window=32), node.quant, node.state.beta,
                        node.state.gamma_abs)
  for step in range(30):
    x = rng.integers(-40, 90, (int(rng.integers(1, 4)), 2, 2, 3)).astype(np.int8)
    np.testing.assert_array_equal(node(x, "adapt"), plain(x, "adapt"), f"step {step}")
    np.testing.assert_array_equal(node.state.data, plain.state.data)
    node.commit(rng.integers(0, 4, len(x)))
  before = reference.classes_reset(node.state.beta, node.state.gamma_abs,
                                   node.state.offsets)
  assert not np.array_equal(node.state.classes, reference.class_views(before, 4, 3))


@pytest.mark.parametrize("fn", ["c", "reference"])
def test_adapt_safe_normalizes_with_the_class_mixture_and_leaves_the_label_blind_alone(fn):
  """A run of one class moves that class's statistics only: adapt_safe normalizes with
  the mixture of all classes, and the label-blind [mu, var] do not follow the run."""
  node = _mixed_node()
  run = node if fn == "c" else node.reference
  x = np.full((1, 2, 2, 3), 60, np.int8)  # 3.0 where every clean mean is about 0.
  blind = node.state.data.copy()
  for _ in range(50):
    run(x, "adapt_safe")
    node.commit([2]) if fn == "c" else node.reference_commit([2])
  assert node.state.data.tobytes() == blind.tobytes()
  assert node.state.classes[0, 2].min() > 2.5  # Class 2 learned the run ...
  mixture = reference.classes_mixture(node.state.beta, node.state.gamma_abs,
                                      node.state.offsets, node.state.block)[1]
  assert mixture[:3].max() < 1.0  # ... which the mixture holds to a quarter.
  want = reference.recalib_step(x, node.state.beta, node.state.gamma_abs, mixture,
                                opts=node.options, q=reference.prepare_quant(
                                    "none", 0.05, 0, 0.05, 0), mode="frozen")[0]
  np.testing.assert_array_equal(run(x, "adapt_safe"), want)


def test_the_removed_class_guard_option_is_an_unknown_key():
  from flatbuffers import flexbuffers
  data = flexbuffers.Dumps({"window": 64, "classes": 10, "class_guard": 4096})
  with pytest.raises(ValueError, match="unknown option key 'class_guard'"):
    ops.decode_options(data)


@pytest.mark.parametrize("fn", ["c", "reference"])
def test_a_label_safe_class_balanced_site_adapts_label_blind_in_adapt_safe(fn):
  """SPEC "Adapt-safe mode": label_safe comes first; the images still wait for their
  labels, so the class statistics keep learning."""
  node = _mixed_node()
  node = node.with_options(dataclasses.replace(node.options, label_safe=1))
  plain = ops.RecalibOp(ops.RecalibOptions(window=32), node.quant, node.state.beta,
                        node.state.gamma_abs)
  x = np.full((1, 2, 2, 3), 60, np.int8)
  y = node(x, "adapt_safe") if fn == "c" else node.reference(x, "adapt_safe")
  np.testing.assert_array_equal(y, plain(x, "adapt"))
  np.testing.assert_array_equal(node.state.data, plain.state.data)
  assert node.state.pending is not None
