"""The gate: decide per stream whether adapting helps.

For the first `warmup_batches` batches of a stream both paths run on every
batch: the source (the op's `source` mode: the clean targets, the adapted state
left alone) and the adapting one (state updated). Predictions come from the source
meanwhile, so the probe itself can never hurt. (Comparing against frozen at the
adapted state would only measure the latest update.) Then the gate keeps adapting for the rest of the stream only if
the probe's score exceeds `delta`; otherwise it resets FORGE to the clean
targets and stays frozen (reverts to source). A probe whose running score is already
far above the margin (`early_delta`, from `early_images` probed images on) decides
"on" without waiting for its end; "off" always takes the whole probe.

Without stream boundaries (a device never sees "the start of a stream"), `period`
makes the gate keep deciding: every `period` images from the start of the last probe
it probes again, for the same length, and decides again. While re-probing it
predicts with whichever path it chose last (so a probe never costs accuracy); the
adapting path continues from its state if the gate is on, or starts from the clean
targets if it is off (class-balanced models: from the state kept, see for_model). So a
stream that shifts into a domain adapting helps turns the gate on within one period
plus one probe, and a stream that shifts back (or whose adaptation starts to hurt)
turns it off. Device cost of a probe: a second forward
pass per image in `source` mode (ForgeRecalibControl::SetMode); no state copy.

Label-correlated streams (a fixed camera sees one object for many frames) fool every
score above: normalizing a window of one class removes that class's signal and
spreads the predictions, which looks like undoing a collapse. So the gate also
measures, over the probe, the lag-1 autocorrelation of the source's softmax vectors
(SerialStats: 0 for i.i.d. labels, near 1 when neighbours share a class) and does not
adapt while it exceeds `max_autocorrelation` (on class-balanced models only where the
adapting path's own predictions do not show the correlation, see for_model). It costs
K + 4 floats on a device (K + 3 more for the adapting path's). It
only sees correlation that changes inside the probe: a probe within one long run of a
class (longer than the probe) looks like a collapsed source and passes
(benchmarks/results/field_protocols.md: sorted by class, 1,000 images per class).

Scores, over all of the probe's images (so they mean the same at any batch size):
  diversity_gain   H(mean p_adapting) - H(mean p_source), in nats: does adapting
                   undo the source's collapse onto a few classes? (default)
  confidence_gain  mean top-1 confidence, adapting minus source (the method's
                   original statistic)
  confidence_drop  reference - mean top-1 confidence of the source, where the
                   reference is the source's confidence on clean held-out data:
                   "is this stream shifted at all?" (needs that reference)
Why diversity is the default: under a shift the BN-folded source piles its
predictions onto a few classes, often confidently, and re-normalizing spreads
them out again. Confidence misjudges exactly the streams where the source is
confidently wrong. On the 88.24% ResNet-20 (3 orderings) FORGE lifts
impulse_noise by 21.4 points and lowers jpeg_compression by 3.8, yet their
confidence gains over 1280 images overlap (-0.012 to -0.028 vs -0.025 to
-0.027); their diversity gains over 256 images do not (0.42 to 0.51 vs 0 to
0.015 nats). The diversity gain assumes the stream is not label-shifted
(classes roughly balanced over the probe), as BN-style adaptation itself does.
Figures: benchmarks/results/resnet20_cifar10/ (gate_sweep*.md).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from forge_tflm.evaluation.int8_methods import Int8Method
from forge_tflm.runtime.segmented import ADAPT, FROZEN, SOURCE

DIVERSITY_GAIN = "diversity_gain"
CONFIDENCE_GAIN = "confidence_gain"
CONFIDENCE_DROP = "confidence_drop"
SIGNALS = (DIVERSITY_GAIN, CONFIDENCE_GAIN, CONFIDENCE_DROP)

# Default probe length in images (at batch 1 the 256-image probe is 256
# batches, not 4) and margin per signal, chosen on the 88.24% ResNet-20 over
# 3 orderings (gate_sweep*.md): a probe that hurts no corruption for the chosen
# margin and its neighbours. The probe predicts with the source, so a longer one
# costs recovery: diversity needs only 192-320 images (hurt and clean streams
# score <= 0.015 nats, every stream FORGE lifts by 3+ points >= 0.050).
DEFAULT_WARMUP_IMAGES = {DIVERSITY_GAIN: 256, CONFIDENCE_GAIN: 1280, CONFIDENCE_DROP: 640}
DEFAULT_DELTA = {DIVERSITY_GAIN: 0.03, CONFIDENCE_GAIN: 0.0, CONFIDENCE_DROP: 0.05}
# Early "on" (diversity only): from this many probed images on, a probe whose running
# score already exceeds the early margin, and that does not look label-correlated
# (GateConfig.early_max_autocorrelation), decides "on" at once instead of predicting
# with the source to its end (a one-sided sequential test: "off" still waits for the
# whole probe). The probe predicts with the source, so at batch 1 each of its images
# costs recovery on every stream adapting helps. 128 images is the guard's agreement
# window (class_guard / 32 at the default 4096): before it, on a stream sorted by
# class, the guard may not have caught the first run, the label-blind statistics
# normalize it away, and an early "on" acts on that (MobileNetV2-0.5, fog sorted, batch
# 1: -0.5 points from 96 images, -0.3 from 128, +0.1 from 192). On the bundled ResNet-20's
# first probes (15 corruptions x 3 orderings x shuffled, Dirichlet 0.1 / 0.01 and sorted,
# batch 1), from 96 images on margins of 0.08-0.15 changed no decision, only its timing
# (benchmarks/results/gate_early_probe.md). Defaults apply at batch 1 (the device) and to
# class-balanced models (for_model): at batch 64 a batch of one class is normalized by its
# own statistics before the guard sees a label, the first probe of a stream sorted by
# class turns on anyway, and deciding at 128 images instead of 256 only let that wrong
# decision act sooner (glass_blur sorted: -0.9 -> -1.1 points); on a label-blind model
# the early decision sees too few class changes for its veto and turned 10 of 180 "off"
# probes on (gate_early_probe_labelblind.md). An explicit early_images applies anywhere.
DEFAULT_EARLY_IMAGES = {DIVERSITY_GAIN: 128}
DEFAULT_EARLY_DELTA = {DIVERSITY_GAIN: 0.1}
# Above it a probe counts as label-correlated. On the bundled ResNet-20's 256-image
# probes i.i.d. streams scored below 0.08 and label-correlated ones mostly above 0.19;
# a corruption that collapses the source hides the labels from its predictions (and
# lowers the score), so the margin sits low. Measurements and the chosen value's
# effect: benchmarks/results/field_protocols*.md.
DEFAULT_MAX_AUTOCORRELATION = 0.1
# Below it (|score|, nats) a probe found the adapting path inert: it changed nothing,
# which for a class-balanced model means the guard is flagged and the class statistics
# never move (a source too collapsed to be confident). Only then does the gate, while
# off, feed the source's labels to the guard's detector (GatedForge, SPEC "Observe"):
# after a probe that changed predictions the off decision is about adapting, and the
# source's collapsed labels would dull the detector to later runs of one class
# (benchmarks/results/field_protocols_guard_observe_bs1.md: impulse_noise sorted).
DEFAULT_INERT_SCORE = 1e-3
# The re-probing period a device uses (it never sees a stream boundary); the
# evaluator's default stays "decide once per stream". field_protocols*.md measure it.
DEVICE_PERIOD = 1024


@dataclasses.dataclass(frozen=True)
class GateConfig:
  warmup_batches: int | None = None  # None: DEFAULT_WARMUP_IMAGES / batch size.
  delta: float | None = None         # None: DEFAULT_DELTA[signal].
  signal: str = DIVERSITY_GAIN
  # confidence_drop only: the source's mean top-1 confidence on clean data.
  reference: float | None = None
  # Images from the start of one probe to the next (boundary-free operation);
  # None: probe once, at the start of each stream.
  period: int | None = None
  # Veto on label-correlated probes (see module); None: no veto.
  max_autocorrelation: float | None = DEFAULT_MAX_AUTOCORRELATION
  # The veto holds only where adaptation concealed the correlation: the adapting
  # path's own predictions over the probe are not label-correlated (at most
  # max_autocorrelation). Set by for_model for class-balanced models (see there).
  concealed_veto: bool = False
  # Off decisions keep FORGE's state (predicting in source mode meanwhile) instead of
  # resetting it; set by for_model for class-balanced models (see there).
  keep_state: bool = False
  # With keep_state: an off decision after a probe scoring within this of 0 feeds the
  # source's outputs to the guard's detector until the next probe (see
  # DEFAULT_INERT_SCORE); 0: never.
  inert_score: float = DEFAULT_INERT_SCORE
  # Early "on" (see DEFAULT_EARLY_IMAGES): probed images before a probe may decide
  # "on" early, None: the signal's default at batch 1 and never at larger batches (nor
  # on label-blind models, for_model), 0: never; and the margin it must exceed (None:
  # the signal's default, at least `margin`).
  early_images: int | None = None
  early_delta: float | None = None

  @property
  def off_mode(self) -> str:
    """The op's mode while the gate is off: SOURCE with the state kept, else FROZEN
    (after the reset: the clean targets, the same predictions)."""
    return SOURCE if self.keep_state else FROZEN

  def __post_init__(self):
    if self.signal not in SIGNALS:
      raise ValueError(f"unknown gate signal {self.signal!r}; known: {', '.join(SIGNALS)}")
    if self.warmup_batches is not None and self.warmup_batches < 1:
      raise ValueError("gate warmup_batches must be >= 1")
    if self.period is not None and self.period < 1:
      raise ValueError("gate period must be >= 1 image")
    if self.max_autocorrelation is not None and not math.isfinite(self.max_autocorrelation):
      raise ValueError("gate max_autocorrelation must be a finite number")
    if self.early_images is not None and self.early_images < 0:
      raise ValueError("gate early_images must be >= 0 (0: never decide early)")
    if self.early_delta is not None:
      if not math.isfinite(self.early_delta):
        raise ValueError("gate early_delta must be a finite number")
      if self.early_delta < self.margin:
        raise ValueError(f"gate early_delta ({self.early_delta}) must be >= the"
                         f" probe's margin delta ({self.margin})")
    if not self.inert_score >= 0.0:
      raise ValueError(f"gate inert_score must be >= 0, got {self.inert_score}")
    if self.reference is not None and not 0.0 < self.reference <= 1.0:
      raise ValueError(f"gate reference is a mean softmax confidence in (0, 1], got"
                       f" {self.reference}")

  def batches(self, batch_size: int) -> int:
    if self.warmup_batches is not None:
      return self.warmup_batches
    return max(1, -(-DEFAULT_WARMUP_IMAGES[self.signal] // batch_size))

  @property
  def margin(self) -> float:
    return DEFAULT_DELTA[self.signal] if self.delta is None else self.delta

  def early_after(self, batch_size: int) -> int:
    """Probed images from which a probe may decide "on" early; 0: never."""
    if self.early_images is not None:
      return self.early_images
    return DEFAULT_EARLY_IMAGES.get(self.signal, 0) if batch_size == 1 else 0

  @property
  def early_margin(self) -> float:
    if self.early_delta is not None:
      return self.early_delta
    return max(DEFAULT_EARLY_DELTA.get(self.signal, self.margin), self.margin)

  @property
  def early_max_autocorrelation(self) -> float:
    """The early decision's label-correlation veto: the gate's own (unconditional:
    the early "on" is only a shortcut, and a probe that looks label-correlated waits
    for its end), or the default where the gate has none."""
    if self.max_autocorrelation is not None:
      return self.max_autocorrelation
    return DEFAULT_MAX_AUTOCORRELATION

  @property
  def needs_reference(self) -> bool:
    return self.signal == CONFIDENCE_DROP and self.reference is None


def for_model(config: GateConfig, class_balanced: bool) -> GateConfig:
  """The gate a model runs. The autocorrelation veto stands in for a label defence:
  label-blind statistics normalize a label-correlated window's class away. A model
  with class-balanced statistics (SPEC "Class-balanced statistics") is that defence,
  so its gate vetoes only where the defence failed to act (concealed_veto): the
  source's predictions over the probe are label-correlated but the adapting path's
  are not, i.e. the guard never flagged and the label-blind statistics normalized
  the runs away, which the score mistakes for "adapting undoes a collapse"
  (MobileNetV2-0.5, glass_blur sorted by class, batch 64:
  benchmarks/results/gate_guard_veto_probe*.md). Where the adapting path keeps the
  correlation the class statistics are acting, and vetoing would forfeit exactly the
  streams the defence recovers (benchmarks/results/field_protocols_balanced*.md). Its state
  also survives an off decision (the gate predicts with the op's source mode until it
  turns on again): the guard's label history spans many runs of a class, and a reset
  at every off decision restarted it inside a run, where the label-blind statistics
  absorbed the class before the guard caught it again (sorted streams, batch 64:
  6/15 corruptions hurt, benchmarks/results/field_protocols_guard*.md). After a probe
  that found the adapting path inert (DEFAULT_INERT_SCORE) the source-mode outputs feed
  the guard's detector while off (SegmentedModel.observe): at batch 1 a shift that
  collapses the source onto a few classes (contrast) can set the flag before the
  label-blind statistics undo the collapse; the class statistics never move, the probe
  sees an adapting path that does nothing and turns off, and a detector that read only
  adapted labels would keep that flag for good (field_protocols_guard_bs1.md)."""
  if class_balanced:
    return dataclasses.replace(config, concealed_veto=True, keep_state=True)
  if config.early_images is None:
    return dataclasses.replace(config, early_images=0)
  return config


def device_defines(config: GateConfig) -> dict[str, str]:
  """The gate's settings as the C literals a firmware build takes (forge_gate.h's
  ForgeGateConfig at batch 1; esp32s3_app/main reads them from the generated header),
  so the device runs exactly the rule evaluated (no period: decide once, 0)."""
  return {"FORGE_APP_GATE_PROBE_IMAGES": str(config.batches(1)),
          "FORGE_APP_GATE_PERIOD": str(config.period or 0),
          "FORGE_APP_GATE_DELTA": repr(float(config.margin)),
          "FORGE_APP_GATE_MAX_AUTOCORRELATION": repr(float(
              config.max_autocorrelation if config.max_autocorrelation is not None
              else 1e300)),
          "FORGE_APP_GATE_CONCEALED_VETO": "true" if config.concealed_veto else "false",
          "FORGE_APP_GATE_KEEP_STATE": "true" if config.keep_state else "false",
          "FORGE_APP_GATE_INERT_SCORE": repr(float(config.inert_score)),
          "FORGE_APP_GATE_EARLY_IMAGES": str(config.early_after(1)),
          "FORGE_APP_GATE_EARLY_DELTA": repr(float(config.early_margin)),
          "FORGE_APP_GATE_EARLY_MAX_AUTOCORRELATION": repr(float(
              config.early_max_autocorrelation))}


def softmax(logits: np.ndarray) -> np.ndarray:
  z = np.exp(logits - logits.max(axis=1, keepdims=True))
  return z / z.sum(axis=1, keepdims=True)


def top1_confidence(logits: np.ndarray) -> np.ndarray:
  return softmax(logits).max(axis=1)


def entropy(p: np.ndarray) -> float:
  p = p[p > 0]
  return float(-(p * np.log(p)).sum())


@dataclasses.dataclass(frozen=True)
class ProbeStats:
  """Sums over the probe's images of what the scores compare, source vs adapting.

  Sums add up batch by batch, so the sweep (benchmarks/gate_sweep.py) prices
  any probe length from per-batch rows with the same arithmetic as the gate.
  """
  images: int = 0
  confidence_source: float = 0.0
  confidence_adapted: float = 0.0
  probs_source: np.ndarray | float = 0.0  # Summed softmax vectors.
  probs_adapted: np.ndarray | float = 0.0

  @classmethod
  def of_batch(cls, source_logits: np.ndarray, adapted_logits: np.ndarray) -> "ProbeStats":
    # float64 so that sums over a probe agree to rounding however they are grouped.
    ps = softmax(np.asarray(source_logits, np.float64))
    pa = softmax(np.asarray(adapted_logits, np.float64))
    return cls(len(ps), float(ps.max(axis=1).sum()), float(pa.max(axis=1).sum()),
               ps.sum(axis=0), pa.sum(axis=0))

  def __add__(self, other: "ProbeStats") -> "ProbeStats":
    return ProbeStats(self.images + other.images,
                      self.confidence_source + other.confidence_source,
                      self.confidence_adapted + other.confidence_adapted,
                      self.probs_source + other.probs_source,
                      self.probs_adapted + other.probs_adapted)

  def to_row(self) -> np.ndarray:
    """[images, confidence sums (2), summed probabilities (2 x classes)]."""
    return np.concatenate([[self.images, self.confidence_source, self.confidence_adapted],
                           np.atleast_1d(self.probs_source),
                           np.atleast_1d(self.probs_adapted)])

  @classmethod
  def from_row(cls, row) -> "ProbeStats":
    row = np.asarray(row, np.float64)
    classes = (len(row) - 3) // 2
    return cls(int(row[0]), float(row[1]), float(row[2]), row[3:3 + classes],
               row[3 + classes:])

  def score(self, config: GateConfig) -> float:
    if self.images == 0:
      return float("nan")
    n = self.images
    if config.signal == DIVERSITY_GAIN:
      return entropy(self.probs_adapted / n) - entropy(self.probs_source / n)
    if config.signal == CONFIDENCE_DROP:
      return config.reference - self.confidence_source / n
    return (self.confidence_adapted - self.confidence_source) / n


@dataclasses.dataclass
class SerialStats:
  """Lag-1 autocorrelation of softmax vectors p_t in stream order, accumulated batch by
  batch (the pair across a batch boundary included, so any batch size gives the same):

    rho = (mean_t <p_t, p_{t-1}> - |p_bar|^2) / (mean_t |p_t|^2 - |p_bar|^2)

  0 in expectation when labels are i.i.d., near 1 when consecutive images share a
  class. A probe whose predictions barely vary (denominator < MIN_SPREAD: every image
  looks alike, e.g. a collapsed source) carries no evidence and scores 0.
  """
  MIN_SPREAD = 1e-3
  images: int = 0
  pairs: int = 0
  lag_dot: float = 0.0
  squares: float = 0.0
  total: np.ndarray | float = 0.0
  last: np.ndarray | None = None

  def add(self, logits: np.ndarray) -> None:
    p = softmax(np.asarray(logits, np.float64))
    if not len(p):
      return
    if self.last is not None:
      self.lag_dot += float(self.last @ p[0])
      self.pairs += 1
    self.lag_dot += float((p[1:] * p[:-1]).sum())
    self.pairs += len(p) - 1
    self.images += len(p)
    self.squares += float((p * p).sum())
    self.total = self.total + p.sum(axis=0)
    self.last = p[-1].copy()

  def autocorrelation(self) -> float:
    if self.pairs == 0:
      return 0.0
    mean = self.total / self.images
    base = float(mean @ mean)
    spread = self.squares / self.images - base
    if spread < self.MIN_SPREAD:
      return 0.0
    return (self.lag_dot / self.pairs - base) / spread


def gate_fires(stats: ProbeStats, config: GateConfig,
               serial: SerialStats | None = None,
               serial_adapted: SerialStats | None = None) -> bool:
  """The decision after the probe: keep adapting iff its score exceeds the margin and
  (with a veto configured and `serial`, the source's, given) the probe is not
  label-correlated; with `concealed_veto`, unless the adapting path's predictions
  (`serial_adapted`) are label-correlated too (the class statistics kept the class)."""
  limit = config.max_autocorrelation
  if serial is not None and limit is not None and serial.autocorrelation() > limit:
    if not (config.concealed_veto and serial_adapted is not None
            and serial_adapted.autocorrelation() > limit):
      return False
  return stats.score(config) > config.margin


def fires_early(stats: ProbeStats, config: GateConfig, serial: SerialStats) -> bool:
  """The early "on" decision inside a probe (see DEFAULT_EARLY_IMAGES)."""
  return (serial.autocorrelation() <= config.early_max_autocorrelation
          and stats.score(config) > config.early_margin)


def clean_reference(model, x_int8: np.ndarray, batch_size: int = 256) -> float:
  """The source's mean top-1 confidence over clean (quantized) images."""
  model.reset()
  total = 0.0
  for start in range(0, len(x_int8), batch_size):
    logits = model.dequantize_output(model.run(x_int8[start:start + batch_size], FROZEN))
    total += float(top1_confidence(logits).sum())
  return total / len(x_int8)


class GatedForge(Int8Method):
  name = "forge-gated"
  adaptive = True

  def __init__(self, model, config: GateConfig = GateConfig(), batch_size: int = 64):
    if config.needs_reference:
      raise ValueError("the confidence_drop gate needs the source's clean confidence"
                       " (GateConfig.reference)")
    super().__init__(model)
    self.config = for_model(config, model.class_balanced)
    self.warmup_batches = config.batches(batch_size)
    self.early_after = self.config.early_after(batch_size)
    self.reset()

  def reset(self):
    super().reset()
    self.probe = ProbeStats()
    self.serial, self.serial_adapted = SerialStats(), SerialStats()
    self.batches_probed = 0
    self.probing = True
    self.fired: bool | None = None  # The last decision; None before the first.
    self.observing = False  # Off after an inert probe: the source feeds the detector.
    self.decisions: list[bool] = []
    # Of the last decision.
    self.last_score = self.last_autocorrelation = float("nan")
    self.last_autocorrelation_adapted = float("nan")
    self.images_since_probe = 0
    self.images = 0
    self.images_adapted = 0  # Predicted by the adapting path.

  def predict(self, x_int8):
    adapting = bool(self.fired)
    if self.probing:
      frozen = self.logits(x_int8, SOURCE)
      adapted = self.logits(x_int8, ADAPT)
      self.probe = self.probe + ProbeStats.of_batch(frozen, adapted)
      self.serial.add(frozen)
      self.serial_adapted.add(adapted)
      self.batches_probed += 1
      out = adapted if adapting else frozen
      if self.batches_probed == self.warmup_batches:
        self._decide(gate_fires(self.probe, self.config, self.serial, self.serial_adapted))
      elif (0 < self.early_after <= self.probe.images
            and fires_early(self.probe, self.config, self.serial)):
        self._decide(True)
    elif self.observing:
      # Off after an inert probe: the source's labels keep the guard's detector
      # reading the stream (SPEC "Observe"), so a flag the source's own collapse set
      # can clear while nothing adapts (see for_model).
      y = self.model.run(x_int8, mode=SOURCE)
      self.model.observe(y)
      out = self.model.dequantize_output(y)
    else:
      out = self.logits(x_int8, ADAPT if adapting else self.config.off_mode)
    n = len(x_int8)
    self.images += n
    self.images_adapted += n if adapting else 0
    self.images_since_probe += n
    period = self.config.period
    if period is not None and not self.probing and self.images_since_probe >= period:
      self.probing, self.probe, self.batches_probed = True, ProbeStats(), 0
      self.serial, self.serial_adapted = SerialStats(), SerialStats()
      self.images_since_probe = 0
    return out

  def _decide(self, fired: bool) -> None:
    """Ends the probe with its decision (the whole probe's, or an early "on")."""
    self.last_score = self.probe.score(self.config)
    self.last_autocorrelation = self.serial.autocorrelation()
    self.last_autocorrelation_adapted = self.serial_adapted.autocorrelation()
    self.fired = fired
    self.observing = (not fired and self.config.keep_state
                      and abs(self.last_score) < self.config.inert_score)
    self.decisions.append(fired)
    self.probing = False
    if not fired and not self.config.keep_state:
      self.model.reset()

  @property
  def adapted_fraction(self) -> float:
    """Share of the images predicted by the adapting path so far."""
    return self.images_adapted / self.images if self.images else 0.0

  @property
  def score(self) -> float:
    """The probe's score so far (NaN before the first batch)."""
    return self.probe.score(self.config)

  @property
  def autocorrelation(self) -> float:
    """The probe's label autocorrelation so far (SerialStats)."""
    return self.serial.autocorrelation()
