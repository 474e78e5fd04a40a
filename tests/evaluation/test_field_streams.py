"""forge_tflm.evaluation.field_streams: composition, label proportions, determinism."""

import numpy as np
import pytest

from forge_tflm.evaluation import field_streams as fs
from forge_tflm.evaluation.protocol import EvalConfig, Stream, evaluate_stream, ordering

CLASSES, PER_CLASS = 10, 60


def _streams(names=("fog", "snow", "glass_blur")):
  rng = np.random.default_rng(0)
  labels = np.repeat(np.arange(CLASSES), PER_CLASS)  # label-sorted, as the shared copies
  out = []
  for d, name in enumerate(names):
    images = rng.integers(0, 256, (len(labels), 4, 4, 3), dtype=np.uint8)
    images[:, 0, 0, 0] = d  # Marks the domain of each image.
    out.append(Stream(name, images, labels))
  return out


def _slot_purity(labels, slot):
  """Mean over slots of the most frequent class's share."""
  return float(np.mean([np.bincount(labels[i:i + slot]).max() / len(labels[i:i + slot])
                        for i in range(0, len(labels), slot)]))


def test_default_protocol_is_the_original_shuffled_one():
  streams = _streams()
  built = fs.build("reset_each_shift", streams, fs.LabelOrder())
  assert built == streams
  np.testing.assert_array_equal(built[0].order(2, 5), ordering(len(streams[0].labels), 2, 5))


@pytest.mark.parametrize("protocol", ["continual", "mixed"])
def test_pooled_protocols_present_every_image_once_with_its_domain(protocol):
  streams = _streams()
  (s,) = fs.build(protocol, streams, fs.LabelOrder())
  n = sum(len(x.labels) for x in streams)
  assert len(s.labels) == n and s.domain_names == ("fog", "snow", "glass_blur")
  np.testing.assert_array_equal(s.images[:, 0, 0, 0], s.domains)
  for k in range(3):
    order = s.order(k, 0)
    assert sorted(order.tolist()) == list(range(n))
    np.testing.assert_array_equal(order, s.order(k, 0))  # Deterministic by (seed, k).
  assert not np.array_equal(s.order(0, 0), s.order(1, 0))
  assert not np.array_equal(s.order(0, 0), s.order(0, 1))
  domains_seen = s.domains[s.order(0, 0)]
  changes = int(np.sum(domains_seen[1:] != domains_seen[:-1]))
  if protocol == "continual":
    assert changes == 2  # Three domains back to back.
    firsts = {tuple(np.unique(s.domains[s.order(k, 0)][:1])) for k in range(8)}
    assert len(firsts) > 1  # The domain order is drawn per ordering.
  else:
    assert changes > n / 2  # Interleaved image by image.


def test_label_orders_control_label_correlation():
  labels = np.repeat(np.arange(CLASSES), PER_CLASS)
  rng = lambda: np.random.default_rng(3)  # noqa: E731
  purity = {}
  for spec in [fs.LabelOrder(), fs.LabelOrder("dirichlet", 1.0, 64),
               fs.LabelOrder("dirichlet", 0.1, 64), fs.LabelOrder("dirichlet", 0.01, 64),
               fs.LabelOrder("sorted")]:
    order = spec.order(labels, rng())
    assert sorted(order.tolist()) == list(range(len(labels)))
    np.testing.assert_array_equal(order, spec.order(labels, rng()))
    purity[spec.spec] = _slot_purity(labels[order], 64)
  values = list(purity.values())
  assert values == sorted(values), purity  # Less alpha, more correlated.
  # 60 images per class against 64-image windows: sorted reaches ~0.73.
  assert values[0] < 0.3 and values[-2] > 0.6 and values[-1] > 0.7, purity
  sorted_labels = labels[fs.LabelOrder("sorted").order(labels, rng())]
  assert int(np.sum(sorted_labels[1:] != sorted_labels[:-1])) == CLASSES - 1


def test_continual_with_dirichlet_correlates_labels_inside_each_domain():
  (s,) = fs.continual(_streams(), fs.LabelOrder("dirichlet", 0.01, 32))
  order = s.order(0, 0)
  assert _slot_purity(s.labels[order], 32) > 0.6
  domains_seen = s.domains[order]
  assert int(np.sum(domains_seen[1:] != domains_seen[:-1])) == 2


def test_gradual_uses_each_image_once_at_severities_1_to_5_to_1():
  by_severity = {}
  for sev in range(1, 6):
    (stream,) = _streams(("fog",))
    images = stream.images.copy()
    images[:, 0, 0, 1] = sev
    by_severity[sev] = Stream("fog", images, stream.labels)
  s = fs.gradual(by_severity, fs.LabelOrder(), seed=0)
  assert s.name == "gradual_fog" and len(s.labels) == CLASSES * PER_CLASS
  assert s.domain_names == tuple(f"severity_{k}" for k in range(1, 6))
  np.testing.assert_array_equal(s.images[:, 0, 0, 1], s.domains + 1)
  order = s.order(0, 0)
  seen = s.domains[order] + 1
  runs = [int(seen[0])] + [int(b) for a, b in zip(seen[:-1], seen[1:]) if a != b]
  assert runs == list(fs.GRADUAL_SEVERITIES)
  # No clean image appears twice: the segments are disjoint.
  assert len({s.images[i].tobytes() for i in range(len(s.labels))}) == len(s.labels)


class _Majority:
  """A stand-in float method: class 0 for domain-0 images, class 9 for the others."""
  adaptive = True

  def __init__(self, labels):
    self.labels = labels

  def reset(self):
    pass

  def diagnostics(self):
    return {}

  def predict(self, images):
    domain = images[:, 0, 0, 0]
    logits = np.zeros((len(images), CLASSES))
    logits[np.arange(len(images)), np.where(domain == 0, 0, 9)] = 1
    return logits


def test_evaluation_reports_accuracy_per_domain():
  streams = _streams(("a", "b"))
  for s in streams:
    s.labels[:] = 9  # Domain "b" is always right, domain "a" always wrong.
  (s,) = fs.continual(streams, fs.LabelOrder())
  record = evaluate_stream(EvalConfig(methods=("tent",), orderings=2),
                           {"tent": _Majority(s.labels)}, s, contract=None)
  assert record["accuracy"]["tent"] == [0.5, 0.5]
  assert record["domain_accuracy"]["tent"] == {"a": [0.0, 0.0], "b": [1.0, 1.0]}
  assert record["order"] == "continual, shuffled"


def test_label_order_validation():
  with pytest.raises(ValueError, match="alpha > 0"):
    fs.LabelOrder("dirichlet")
  with pytest.raises(ValueError, match="protocol must be one of"):
    fs.build("circular", _streams(), fs.LabelOrder())
  with pytest.raises(ValueError, match="gradual protocol needs"):
    fs.build("gradual", _streams(), fs.LabelOrder())
