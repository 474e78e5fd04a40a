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
  targets, window-rate options (momentum also drawn), both variance estimators and
  the guard off or on (SPEC "Guard")."""
  case = cases.random_case(rng, steps=steps)
  k = int(rng.choice([2, 3, 10, 17]))
  c = case.beta.shape[0]
  spread = np.where(case.gamma_abs > 0, case.gamma_abs, 1.0)
  offsets = (rng.normal(0, 1, (k, c)) * spread * rng.uniform(0, 2)).astype(np.float32)
  offsets = np.clip(offsets, -2.0**40, 2.0**40).astype(np.float32)
  guard = [None, 32, 33, 64, 4096][int(rng.integers(5))]
  opts = dataclasses.replace(case.opts, classes=k, class_guard=guard)
  return case, opts, offsets


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
  x = case.batches[0]
  outs = []
  for fn in ("c", "reference"):
    node = ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
    node.state.classes[0, 0, 0] = np.nan
    node.state.classes[1, 1, -1] = -1.0
    y = node(x, "adapt") if fn == "c" else node.reference(x, "adapt")
    assert np.isfinite(node.state.classes).all() and (node.state.classes[1] >= 0).all()
    outs.append((y, node.state.classes.tobytes(), node.state.data.tobytes()))
  assert outs[0][1:] == outs[1][1:]
  np.testing.assert_array_equal(outs[0][0], outs[1][0])


@pytest.mark.parametrize("corrupt", ["blind_mean", "blind_var", "histogram",
                                     "agreement", "previous", "flag"])
def test_unusable_guard_state_is_repaired_identically(corrupt):
  """SPEC "Repair" of the guard: a label-blind channel like the plain state, the
  detector as a whole (reset: no evidence, flag clear)."""
  rng = np.random.default_rng(6)
  case, opts, offsets = _class_case(rng, steps=1)
  opts = dataclasses.replace(opts, class_guard=64)
  x = case.batches[0]
  outs = []
  for fn in ("c", "reference"):
    node = ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
    st, k = node.state, opts.classes
    {"blind_mean": lambda: st.blind[0].__setitem__(0, np.inf),
     "blind_var": lambda: st.blind[1].__setitem__(-1, -2.0),
     "histogram": lambda: st.detector.__setitem__(0, 1.5),
     "agreement": lambda: st.detector.__setitem__(k, np.nan),
     "previous": lambda: st.detector.__setitem__(k + 1, 0.5),
     "flag": lambda: st.detector.__setitem__(k + 2, 2.0)}[corrupt]()
    y = node(x, "adapt") if fn == "c" else node.reference(x, "adapt")
    clean = reference.classes_reset(case.beta, case.gamma_abs, offsets)
    _, clean_blind, clean_det = reference.class_views(clean, k, len(case.beta))
    if corrupt.startswith("blind"):  # Repaired, then adapted like the plain op.
      assert np.isfinite(st.blind).all() and (st.blind[1] >= 0).all()
    else:
      np.testing.assert_array_equal(st.detector, clean_det)
    outs.append((y.tobytes(), st.block.tobytes(), st.data.tobytes()))
  assert outs[0] == outs[1]


def _guard_node(guard=64, k=4):
  c = 3
  offsets = np.linspace(-1, 1, k * c).reshape(k, c).astype(np.float32)
  offsets -= offsets.mean(0, dtype=np.float32)
  opts = ops.RecalibOptions(window=32, classes=k, class_guard=guard)
  return ops.RecalibOp(opts, ops.QuantParams(0.05, 0, 0.05, 0), np.zeros(c, np.float32),
                       np.full(c, 2.0, np.float32), offsets=offsets)


@pytest.mark.parametrize("fn", ["c", "reference"])
def test_guard_normalizes_label_blind_until_the_labels_look_correlated(fn):
  """SPEC "Guard": i.i.d. labels keep the flag clear (the op normalizes with the
  label-blind statistics, which every image moves); a run of one class sets it (the
  class mixture); i.i.d. labels clear it again."""
  rng = np.random.default_rng(0)
  node = _guard_node()
  k = node.options.classes
  commit = node.commit if fn == "c" else node.reference_commit
  call = node if fn == "c" else node.reference

  def step(label):
    x = rng.integers(20, 60, (1, 2, 2, 3)).astype(np.int8)  # Shifted: means ~2.
    call(x, "adapt")
    commit([label])

  for label in rng.integers(0, k, 200):
    step(label)
  assert node.state.detector[k + 2] == 0.0
  call(np.zeros((1, 2, 2, 3), np.int8), "frozen")
  np.testing.assert_array_equal(node.state.data, node.state.blind.ravel())
  assert (node.state.blind[0] > 1.0).all()  # The label-blind means followed the shift.
  for _ in range(40):
    step(2)
  assert node.state.detector[k + 2] == 1.0
  call(np.zeros((1, 2, 2, 3), np.int8), "frozen")
  _, mixture = reference.classes_mixture(node.state.beta, node.state.gamma_abs,
                                         node.state.offsets, node.state.block, False)
  np.testing.assert_array_equal(node.state.data, mixture)
  for label in rng.integers(0, k, 200):
    step(label)
  assert node.state.detector[k + 2] == 0.0


def test_guard_detector_follows_the_spec_arithmetic():
  """Histogram at 1/L, agreement at 32/L, flag = a > 1.75 sum h^2, by hand (float64
  is exact enough to compare at float32 tolerance)."""
  node = _guard_node(guard=64, k=4)
  labels = [1, 1, 3, 1, 1, 1, 0] + [2] * 60
  h, a, prev = np.full(4, 0.25), 0.25, -1
  for n, label in enumerate(labels):
    node(np.zeros((1, 2, 2, 3), np.int8), "adapt")
    node.commit([label])
    rate = 1 / 64
    h = h * (1 - rate)
    h[label] += rate
    if prev >= 0:
      a = (1 - 0.5) * a + 0.5 * (label == prev)
    prev = label
    det = node.state.detector
    np.testing.assert_allclose(det[:4], h, rtol=1e-6)
    np.testing.assert_allclose(det[4], a, rtol=1e-6)
    assert det[5] == prev and det[6] == float(a > 1.75 * (h * h).sum())


def test_class_guard_option_needs_classes_and_stays_in_range():
  assert ops.RecalibOptions(window=64, classes=10, class_guard=0).class_guard is None
  opts = ops.RecalibOptions(window=64, classes=10, class_guard=4096)
  assert ops.decode_options(ops.encode_options(opts)) == opts
  for bad, match in (({"class_guard": 64}, "needs classes"),
                     ({"classes": 10, "class_guard": 31}, r"\[32, 2\^24\]"),
                     ({"classes": 10, "class_guard": 2**24 + 1}, r"\[32, 2\^24\]"),
                     ({"classes": 10, "class_guard": -1}, r"\[32, 2\^24\]"),
                     ({"classes": 10, "class_guard": True}, "integer")):
    with pytest.raises(ValueError, match=match):
      ops.RecalibOptions(window=64, **bad)


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


def test_guard_with_its_flag_clear_is_the_plain_op_bit_for_bit():
  """SPEC "Guard": while the labels look independent the op is the label-blind op
  (same outputs, same [mu, var]) on any batch size; the class state still learns."""
  rng = np.random.default_rng(11)
  node = _guard_node(guard=64, k=4)
  plain_opts = ops.RecalibOptions(window=32)
  plain = ops.RecalibOp(plain_opts, node.quant, node.state.beta, node.state.gamma_abs)
  seen = 0
  for step in range(30):
    x = rng.integers(-40, 90, (int(rng.integers(1, 4)), 2, 2, 3)).astype(np.int8)
    np.testing.assert_array_equal(node(x, "adapt"), plain(x, "adapt"), f"step {step}")
    np.testing.assert_array_equal(node.state.data, plain.state.data)
    node.commit(np.arange(seen, seen + len(x)) % 4)  # Never two alike in a row.
    seen += len(x)
    assert not node.state.labels_correlated
  before = reference.classes_reset(node.state.beta, node.state.gamma_abs,
                                   node.state.offsets)
  assert not np.array_equal(node.state.classes, reference.class_views(before, 4, 3)[0])


@pytest.mark.parametrize("seed", range(2))
def test_observed_outputs_match_the_reference_bit_for_bit(seed):
  """observe_output (SPEC "Observe") between adapt/commit steps: the detector takes the
  argmax of source-mode outputs, in C as in numpy; statistics and pending untouched."""
  rng = np.random.default_rng([2613, seed])
  for trial in range(30):
    case, opts, offsets = _class_case(rng)
    ref = ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
    node = ops.RecalibOp(opts, case.quant, case.beta, case.gamma_abs, offsets=offsets)
    k, c = opts.classes, len(case.beta)
    for step, (x, mode) in enumerate(zip(case.batches, case.modes)):
      where = f"trial {trial} step {step} {mode} {opts}"
      np.testing.assert_array_equal(node(x, mode), ref.reference(x, mode), where)
      logits = rng.integers(-128, 128, (len(x), k)).astype(np.int8)
      if rng.random() < 0.5:
        logits[:, int(rng.integers(k))] = 127  # A run of one class.
      before = node.state.block.copy()
      pending = None if node.state.pending is None else node.state.pending.copy()
      node.observe_output(logits)
      ref.reference_observe_output(logits)
      np.testing.assert_array_equal(_bits(node.state.block), _bits(ref.state.block),
                                    where)
      stats = 2 * k * c + 2 * c  # Class and label-blind statistics: left alone.
      np.testing.assert_array_equal(_bits(node.state.block[:stats]),
                                    _bits(before[:stats]), where)
      if opts.class_guard is None:
        np.testing.assert_array_equal(_bits(node.state.block), _bits(before), where)
      if pending is not None:
        np.testing.assert_array_equal(node.state.pending, pending, where)
      if node.state.pending is not None:
        labels = rng.integers(-1, k, len(x))
        node.commit(labels)
        ref.reference_commit(labels)


@pytest.mark.parametrize("fn", ["c", "reference"])
def test_observed_labels_enter_the_detector_like_committed_ones(fn):
  """The detector after observing argmax rows equals the detector after committing the
  same labels (SPEC "Observe" reuses "Detector"), so a collapsed or one-class source
  sets and clears the flag while nothing adapts."""
  seen, done = _guard_node(), _guard_node()
  k = seen.options.classes
  observe = seen.observe_output if fn == "c" else seen.reference_observe_output
  labels = [2] * 40 + list(np.random.default_rng(1).integers(0, k, 300))
  flags = []
  for label in labels:
    row = np.full((1, k), -50, np.int8)
    row[0, label] = 10
    observe(row)
    done(np.zeros((1, 2, 2, 3), np.int8), "adapt")
    done.state.block[:] = reference.classes_commit(
        done.state.block, done.state.pending, [-1], done.options, [label])
    done.state.pending = None
    np.testing.assert_array_equal(seen.state.detector, done.state.detector)
    flags.append(seen.state.detector[k + 2])
  assert max(flags[:40]) == 1.0 and flags[-1] == 0.0


def test_observe_needs_classes_and_rows_of_k():
  node = _guard_node()
  with pytest.raises(ValueError, match=r"int8 \[N, 4\]"):
    node.observe_output(np.zeros((2, 3), np.int8))
  plain = ops.RecalibOp(ops.RecalibOptions(window=32), ops.QuantParams(0.05, 0, 0.05, 0),
                        np.zeros(3, np.float32), np.ones(3, np.float32))
  with pytest.raises(ValueError, match="classes option"):
    plain.observe_output(np.zeros((1, 4), np.int8))
