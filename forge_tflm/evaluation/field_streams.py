"""Field protocols: how a deployed camera sees its domains and its labels.

A protocol turns the per-corruption image sets into evaluation streams (protocol.Stream
with a per-image domain and a presentation order per ordering k):

  reset_each_shift  one stream per corruption, state reset between them (the default,
                    the evaluator's original protocol);
  continual         every chosen corruption in one stream, back to back in an order
                    drawn per ordering, no reset (CoTTA's continual protocol);
  gradual           per corruption one stream of severities 1,2,3,4,5,4,3,2,1 without
                    reset, each segment a disjoint ninth of the images;
  mixed             every corruption in one stream, interleaved image by image.

Each combines with a label order inside a domain (or the pooled stream for mixed):

  shuffled          uniformly shuffled (i.i.d. labels);
  dirichlet         label-correlated: the stream has ceil(n / batch) slots and each class
                    spreads over them with proportions drawn from Dirichlet(alpha),
                    the classes of a slot following one another (the non-i.i.d.
                    sampler of NOTE, RoTTA and the test-time-adaptation benchmark's
                    `SETTING`s); small alpha puts each class in few slots, in bursts;
  sorted            by class, classes in a random order (a fixed camera's worst case).

Orders are a function of (seed, k) only: every method sees the same presentation.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from forge_tflm.evaluation.protocol import Stream, ordering

PROTOCOLS = ("reset_each_shift", "continual", "gradual", "mixed")
LABEL_ORDERS = ("shuffled", "dirichlet", "sorted")
GRADUAL_SEVERITIES = (1, 2, 3, 4, 5, 4, 3, 2, 1)


@dataclasses.dataclass(frozen=True)
class LabelOrder:
  """How labels follow one another inside a domain (see module)."""
  kind: str = "shuffled"
  alpha: float | None = None   # dirichlet only
  slot: int = 64               # dirichlet: images per slot (the batch size)

  def __post_init__(self):
    if self.kind not in LABEL_ORDERS:
      raise ValueError(f"label order must be one of {LABEL_ORDERS}, not {self.kind!r}")
    if self.kind == "dirichlet" and not (self.alpha is not None and self.alpha > 0):
      raise ValueError("the dirichlet label order needs alpha > 0")
    if self.slot < 1:
      raise ValueError("slot must be >= 1")

  @property
  def spec(self) -> str:
    if self.kind == "dirichlet":
      return f"dirichlet(alpha={self.alpha:g}, slot={self.slot})"
    return self.kind

  def order(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A presentation order (a permutation of range(len(labels)))."""
    n = len(labels)
    if self.kind == "shuffled":
      return rng.permutation(n)
    classes = rng.permutation(np.unique(labels))
    if self.kind == "sorted":
      return np.concatenate([rng.permutation(np.flatnonzero(labels == c)) for c in classes])
    slots = max(1, -(-n // self.slot))
    buckets: list[list[np.ndarray]] = [[] for _ in range(slots)]
    for c in classes:
      idx = rng.permutation(np.flatnonzero(labels == c))
      share = rng.dirichlet(np.full(slots, self.alpha))
      counts = rng.multinomial(len(idx), share)
      for s, part in enumerate(np.split(idx, np.cumsum(counts)[:-1])):
        buckets[s].append(part)
    # Inside a slot the classes follow one another in a random order (as in RoTTA's
    # and the TTA benchmark's samplers): with small alpha a class arrives in a burst.
    out = []
    for b in buckets:
      for part in (b[i] for i in rng.permutation(len(b))):
        out.append(part)
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)


def _rng(seed: int, k: int, salt: int) -> np.random.Generator:
  return np.random.default_rng([seed, k, salt])


def presentation_order(label_order: LabelOrder, labels: np.ndarray, seed: int,
                       k: int) -> np.ndarray:
  """Ordering k (of seed) of one corruption's stream under `label_order`, as
  reset_each_shift presents it (shuffled: the original protocol's orders)."""
  if label_order.kind == "shuffled":
    return ordering(len(labels), k, seed)
  return label_order.order(labels, _rng(seed, k, 1))


def reset_each_shift(streams: Sequence[Stream], label_order: LabelOrder) -> list[Stream]:
  """One stream per corruption (shuffled: exactly the original protocol's orders)."""
  if label_order.kind == "shuffled":
    return list(streams)
  out = []
  for s in streams:
    def order(k, seed, labels=s.labels):
      return presentation_order(label_order, labels, seed, k)
    out.append(dataclasses.replace(s, order_fn=order, spec=label_order.spec))
  return out


def _pooled(streams: Sequence[Stream]):
  images = np.concatenate([s.images for s in streams])
  labels = np.concatenate([s.labels for s in streams])
  domains = np.concatenate([np.full(len(s.labels), d) for d, s in enumerate(streams)])
  return images, labels, domains, tuple(s.name for s in streams)


def continual(streams: Sequence[Stream], label_order: LabelOrder) -> list[Stream]:
  """All corruptions back to back in one stream, the domain order drawn per ordering."""
  images, labels, domains, names = _pooled(streams)
  starts = np.cumsum([0] + [len(s.labels) for s in streams])

  def order(k, seed):
    rng = _rng(seed, k, 2)
    parts = []
    for d in rng.permutation(len(streams)):
      local = label_order.order(labels[starts[d]:starts[d + 1]], rng)
      parts.append(starts[d] + local)
    return np.concatenate(parts)

  return [Stream("continual", images, labels, domains=domains, domain_names=names,
                 order_fn=order, spec=f"continual, {label_order.spec}")]


def mixed(streams: Sequence[Stream], label_order: LabelOrder) -> list[Stream]:
  """All corruptions in one stream, interleaved image by image."""
  images, labels, domains, names = _pooled(streams)

  def order(k, seed):
    return label_order.order(labels, _rng(seed, k, 3))

  return [Stream("mixed", images, labels, domains=domains, domain_names=names,
                 order_fn=order, spec=f"mixed, {label_order.spec}")]


def gradual(by_severity: dict[int, Stream], label_order: LabelOrder, seed: int = 0
            ) -> Stream:
  """One corruption at severities 1..5..1 without reset; `by_severity` holds the same
  clean images corrupted at each severity. Segment j takes the j-th ninth of a seeded
  split of the images, so no image repeats."""
  first = by_severity[GRADUAL_SEVERITIES[0]]
  n = len(first.labels)
  if any(len(by_severity[s].labels) != n for s in set(GRADUAL_SEVERITIES)):
    raise ValueError("gradual needs the same images at every severity")
  chunks = np.array_split(np.random.default_rng([seed, 4]).permutation(n),
                          len(GRADUAL_SEVERITIES))
  images = np.concatenate([by_severity[s].images[c] for s, c in
                           zip(GRADUAL_SEVERITIES, chunks)])
  labels = np.concatenate([first.labels[c] for c in chunks])
  domain_names = tuple(f"severity_{s}" for s in sorted(set(GRADUAL_SEVERITIES)))
  domains = np.concatenate([np.full(len(c), s - 1) for s, c in
                            zip(GRADUAL_SEVERITIES, chunks)])
  starts = np.cumsum([0] + [len(c) for c in chunks])

  def order(k, seed_):
    rng = _rng(seed_, k, 5)
    return np.concatenate([starts[j] + label_order.order(labels[starts[j]:starts[j + 1]],
                                                         rng)
                           for j in range(len(chunks))])

  return Stream(f"gradual_{first.name}", images, labels, domains=domains,
                domain_names=domain_names, order_fn=order,
                spec=f"gradual 1-5-1, {label_order.spec}")


def build(protocol: str, streams: Sequence[Stream], label_order: LabelOrder,
          gradual_sources: dict[str, dict[int, Stream]] | None = None,
          seed: int = 0) -> list[Stream]:
  """The evaluation streams of `protocol` (gradual: from `gradual_sources`,
  corruption -> severity -> Stream)."""
  if protocol not in PROTOCOLS:
    raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
  if protocol == "reset_each_shift":
    return reset_each_shift(streams, label_order)
  if protocol == "continual":
    return continual(streams, label_order)
  if protocol == "mixed":
    return mixed(streams, label_order)
  if not gradual_sources:
    raise ValueError("the gradual protocol needs every severity of each corruption")
  return [gradual(by_sev, label_order, seed) for by_sev in gradual_sources.values()]


__all__ = ["GRADUAL_SEVERITIES", "LABEL_ORDERS", "LabelOrder", "PROTOCOLS", "build",
           "presentation_order",
           "continual", "gradual", "mixed", "reset_each_shift"]
