"""The gate in the evaluator: the field controller's C code, driven batch by batch.

The rule (when to probe, how a probe decides, what runs between probes) exists once,
in custom_ops/forge_controller/src/forge_controller.c; this module binds it (`_forge_controller`), so
`forge-gated` and a device running the app take the same decisions by construction.
Its settings are declared once too (forge_controller_settings.h): GateConfig's fields,
the eval flags, the host app's arguments and the firmware's defines all come from
that list. What each setting does and the measurement behind its default:
docs/design/field-robustness.md.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from forge_tflm.evaluation import _forge_controller as _c
from forge_tflm.evaluation.int8_methods import Int8Method
from forge_tflm.ops.options import MODES
from forge_tflm.runtime.segmented import SOURCE


@dataclasses.dataclass(frozen=True)
class Setting:
  name: str
  macro: str   # The firmware define is FORGE_APP_GATE_<macro>.
  kind: str    # "u32" or "f64".
  default: float
  help: str

  def value(self, x):
    """x as this setting's Python type; ValueError if it is not one."""
    if self.kind == "u32":
      if isinstance(x, bool) or int(x) != x or not 0 <= x < 2**32:
        raise ValueError(f"gate {self.name} must be a whole number >= 0, got {x!r}")
      return int(x)
    x = float(x)
    if not math.isfinite(x):
      raise ValueError(f"gate {self.name} must be a finite number, got {x!r}")
    return x


SETTINGS = tuple(Setting(*row) for row in _c.SETTINGS)
# The bound C controller: Controller(settings dict, classes, output scale, output zero
# point) takes the decisions GatedForge follows (its `probed` feeds a probe's outputs);
# MAX_CLASSES is the most output classes it takes.
Controller = _c.Controller
MAX_CLASSES: int = _c.MAX_CLASSES
# The re-probing period a device uses (it never sees a stream boundary); the
# evaluator's default stays "decide once per stream". A probed image runs twice, so
# 256 images every 10,240 cost 2.5% more inference (1,024: 25%, above issue 36's
# budget); label correlation needs no probe (the detector reads every image).
# field_protocols*.md measure periods 1,024 and 10,240 (bench_mcu_cost.py the cost).
DEVICE_PERIOD = 10240


def _check(config) -> None:
  for s in SETTINGS:
    v = getattr(config, s.name)
    if v is not None:
      s.value(v)
  if config.period is not None and config.period < 1:
    raise ValueError("gate period must be >= 1 image")
  if config.probe_images is not None and config.probe_images < 1:
    raise ValueError("gate probe_images must be >= 1")


GateConfig = dataclasses.make_dataclass(
    "GateConfig", [(s.name, object, dataclasses.field(default=None)) for s in SETTINGS],
    frozen=True, namespace={"__post_init__": _check, "__doc__": (
        "The user's gate settings (forge_controller_settings.h); None: the"
        " default.")})
GateConfig.__module__ = __name__  # Pickled to sweep workers (make_dataclass says "types").


def settings(config) -> dict:
  """Every controller setting: the user's, the defaults for the rest."""
  return {s.name: s.value(s.default if getattr(config, s.name) is None
                          else getattr(config, s.name)) for s in SETTINGS}


def device_defines(config) -> dict[str, str]:
  """The settings as the FORGE_APP_GATE_* C literals a firmware build takes
  (forge_controller_settings.h)."""
  resolved = settings(config)
  literal = {"u32": str, "f64": lambda v: repr(float(v))}
  return {f"FORGE_APP_GATE_{s.macro}": literal[s.kind](resolved[s.name]) for s in SETTINGS}


def host_arguments(config) -> list[str]:
  """The same settings as the host app's --gate_<name>= arguments."""
  resolved = settings(config)
  return [f"--gate_{s.name}={resolved[s.name]!r}" for s in SETTINGS]


class GatedForge(Int8Method):
  name = "forge-gated"
  adaptive = True

  def __init__(self, model, config=None):
    super().__init__(model)
    self.config = GateConfig() if config is None else config
    self.settings = settings(self.config)
    self.reset()

  @classmethod
  def create(cls, model, config) -> "GatedForge":
    return cls(model, config.gate)

  def diagnostics(self) -> dict:
    """Per ordering: whether the last decision adapts, the probe's score, the
    detector's flag; with a period also the shares of images adapted and probed and
    the decisions taken (the record keys resume.py checks)."""
    out = {"gate_fired": bool(self.fired), "gate_score": float(self.score),
           "gate_correlated": bool(self.correlated)}
    if self.config.period is not None:
      out.update(gate_adapted=round(self.adapted_fraction, 4),
                 gate_probed=round(self.probed_fraction, 4),
                 gate_decisions=len(self.decisions))
    return out

  def reset(self):
    super().reset()
    scale, zero_point = self.model.output_quant
    classes = int(np.prod(self.model.output_shape))
    self.controller = Controller(self.settings, classes, scale, zero_point)
    self.decisions: list[bool] = []
    # Of the last decision.
    self.last_score = self.last_agreement = self.last_chance = float("nan")
    self.last_correlated = False
    self.images = 0
    self.images_adapted = 0  # Predicted by the adapting path.
    self.images_probed = 0  # Run twice: the probing's cost.

  @property
  def probing(self) -> bool:
    return self.controller.probing

  @property
  def adapting(self) -> bool:
    """Whether the adapting path predicts now (the controller's state)."""
    return self.controller.adapting

  @property
  def fired(self) -> bool | None:
    """The last decision; None before the first."""
    return self.controller.adapting if self.decisions else None

  def predict(self, x_int8):
    c, n = self.controller, len(x_int8)
    step, adapting = c.next(), c.adapting
    if step == _c.STEP_PROBE:
      source = self.model.run(x_int8, mode=SOURCE)
      adapted = self.model.run(x_int8, mode=MODES[c.op_mode(step)])
      event = c.probed(np.ascontiguousarray(source), np.ascontiguousarray(adapted), n)
      y = adapted if adapting else source
      self.images_probed += n
      if event != _c.EVENT_NONE:
        self._decided(event)
    else:
      y = self.model.run(x_int8, mode=MODES[c.op_mode(step)])
      c.ran(np.ascontiguousarray(y), n)
    self.images += n
    self.images_adapted += n if adapting else 0
    return self.model.dequantize_output(y)

  def _decided(self, event: int) -> None:
    c = self.controller
    self.decisions.append(event == _c.EVENT_ON)
    self.last_score = c.score
    self.last_correlated = c.correlated
    self.last_agreement = c.agreement
    self.last_chance = c.chance
    if event == _c.EVENT_OFF:
      self.model.reset()

  @property
  def adapted_fraction(self) -> float:
    """Share of the images predicted by the adapting path so far."""
    return self.images_adapted / self.images if self.images else 0.0

  @property
  def probed_fraction(self) -> float:
    """Share of the images probed so far (each ran the model twice)."""
    return self.images_probed / self.images if self.images else 0.0

  @property
  def score(self) -> float:
    """The probe's score so far (the last decision's between probes)."""
    return self.controller.score

  @property
  def correlated(self) -> bool:
    """Whether the label-correlation detector flags now."""
    return self.controller.correlated
