"""The paper's tables, number by number, next to this project's counterpart.

The paper (FORGE, TMLR 2026; LaTeX in ../shared/paper, a reference outside the
project) is cited by number only. Each row: the paper's table label, the claim, the
paper's number, ours (an `Ours`: which values of which committed result files, and how
they are written; None where nothing here measures it), the file the report links
(`source`) and a note (why it differs, or why it cannot be measured here).
`forge_tflm report` writes them as the report's first section, reading every "ours"
from its file at that time, so the section cannot drift from the results; a value
that is not there reads "missing (<file>)".
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Callable


class Missing(Exception):
  """A result file, or the value asked of it, is not there."""

  def __init__(self, file: str):
    super().__init__(file)
    self.file = file


# What reading a value can raise: the file absent or unreadable, a key, row or
# column not there, a cell that is not a number.
_READ_ERRORS = (OSError, KeyError, IndexError, ValueError, TypeError, AttributeError)


def _same(value: Any) -> Any:
  return value


@dataclasses.dataclass(frozen=True)
class Json:
  """The value at `keys` in a JSON file (repo-relative), passed through `then`."""
  file: str
  keys: tuple
  then: Callable[[Any], Any] = _same

  def __call__(self, root: str) -> Any:
    try:
      with open(os.path.join(root, self.file)) as f:
        value = json.load(f)
      for key in self.keys:
        value = value[key]
      return self.then(value)
    except _READ_ERRORS as e:
      raise Missing(self.file) from e


def table_cell(text: str, row: tuple[str, ...], column: str) -> str:
  """The cell under `column` of the first Markdown table row that starts with `row`."""
  header = None
  for line in text.splitlines():
    if not line.startswith("|"):
      header = None  # a table ends; the next `|` line is a header again
      continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if header is None:
      header = cells
    elif column in header and tuple(cells[:len(row)]) == row:
      return cells[header.index(column)]
  raise KeyError((row, column))


def _number(cell: str) -> int | float:
  digits = cell.replace(",", "").removesuffix("%")
  return int(digits) if digits.lstrip("+-").isdigit() else float(digits)


def section_text(text: str, heading: str) -> str:
  """The lines of the `## ` section whose heading starts with `heading`."""
  lines = text.splitlines()
  start = next(i for i, line in enumerate(lines) if line.startswith("## " + heading))
  end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
             len(lines))
  return "\n".join(lines[start:end])


@dataclasses.dataclass(frozen=True)
class MdCell:
  """A number in a Markdown table (benchmarks' .md and .txt results have no JSON twin);
  `section`: only in the `## ` section whose heading starts with it (a board's)."""
  file: str
  row: tuple[str, ...]
  column: str
  section: str = ""

  def __call__(self, root: str) -> int | float:
    try:
      with open(os.path.join(root, self.file)) as f:
        text = f.read()
      if self.section:
        text = section_text(text, self.section)
      return _number(table_cell(text, self.row, self.column))
    except (*_READ_ERRORS, StopIteration) as e:
      raise Missing(self.file) from e


@dataclasses.dataclass(frozen=True)
class Match:
  """Group 1 of `pattern` (multiline) in a text file."""
  file: str
  pattern: str

  def __call__(self, root: str) -> str:
    try:
      with open(os.path.join(root, self.file)) as f:
        return re.search(self.pattern, f.read(), re.MULTILINE).group(1)
    except _READ_ERRORS as e:
      raise Missing(self.file) from e


@dataclasses.dataclass(frozen=True)
class Ours:
  """Our figure: `template` (str.format) filled with `values`, read when rendered."""
  template: str
  values: tuple[Callable[[str], Any], ...]

  def render(self, root: str) -> str:
    try:
      return self.template.format(*(v(root) for v in self.values))
    except Missing as e:
      return f"missing ({e.file})"


def ours(template: str, *values: Callable[[str], Any]) -> Ours:
  return Ours(template, values)


@dataclasses.dataclass(frozen=True)
class PaperRow:
  """`recorded`: the same figure with the paper's target design (BN statistics recorded
  at fold time) where targets enter it; None where they do not."""
  table: str
  claim: str
  paper: str
  ours: Ours | None
  source: str = ""
  note: str = ""
  recorded: Ours | None = None


_SETTING_TEXT = (
    "**Where our setting differs.** The paper's ResNet-20 holds 50.4% (int8) on its"
    " CIFAR-10-C; ours holds 62.9-63.2% on this package's corruptions of the JPEG CIFAR-10"
    " copy in `../shared` (the model is trained on JPEG-q75 images, which act like a"
    " low-pass augmentation, and distilled: a stronger source leaves less to win back)."
    " So absolute recoveries are about two thirds of the paper's for every method alike."
    " What carries over is the relation on the same streams: FORGE with the paper's"
    " recorded BN targets ({:+.1f}) matches the fp32 BN-adapt ({:+.1f}) and is close to TENT"
    " ({:+.1f}), as in the paper (+20.9, +20.6, +24.9), and it equals recalibrating a kept"
    " BN ({:+.1f} vs {:+.1f}; paper +20.9 vs +20.1). With targets measured on the deployed"
    " int8 model (this package's default) FORGE recovers {:+.1f} on the same streams,"
    " more than both fp32 methods. The closer setting is MLPerf Tiny's ResNet-8, trained on the original"
    " CIFAR-10: its int8 source holds 42.1% and FORGE recovers +19.3 (recorded targets,"
    " whole split, 3 orderings; this JPEG copy is itself a shift for it: FORGE gains +5.1"
    " on the clean split, `benchmarks/results/int8_input.md`).")

TARGETS_NOTE = (
    "**Targets.** \"ours\" is each experiment as last run (`targets` in its result.json:"
    " this package's default measures FORGE's clean targets on the deployed int8 model);"
    " the next column is the paper's design, the BatchNorm statistics recorded at fold"
    " time, from `forge_tflm experiment NAME --targets=recorded` (or the run before"
    " measured targets became the default) kept in `results/recorded_targets/NAME/`;"
    " \"= ours\" where the experiment has only been run with recorded targets, blank where"
    " targets do not enter the figure.")

B = "results/baselines/result.md"
P = "results/per-corruption/result.md"
G = "results/gate/result.md"
GEN = "results/generalization/result.md"
MEM = "benchmarks/results/mcu_memory.md"
S3_COST = "benchmarks/results/esp32s3_cost.txt"
MCU_COST = "benchmarks/results/mcu_cost.txt"


def _json(md: str) -> str:
  """The result.json next to an experiment's result.md (the values; .md is the link)."""
  return md[:-len(".md")] + ".json"


def baseline(method: str, key: str, md: str = B) -> Json:
  """A method's summary figure in the baselines experiment (`md`: or its twin's)."""
  return Json(_json(md), ("results", "summary", method, key))


def _per_corruption(method: str, stream: str, md: str = P) -> Json:
  if stream == "mean":
    return Json(_json(md), ("results", "results", method, "summary", "mean_accuracy"))
  return Json(_json(md), ("results", "results", method, "streams", stream, "accuracy_mean"))


def _gap(key: str) -> Json:
  return _result("results/gap/result.md", "recovery", key)


def setting_note() -> Ours:
  """The section's preamble, its figures read from the result files."""
  return ours(_SETTING_TEXT, baseline("forge", "mean_recovery", _twin(B)),
              baseline("bn-adapt", "mean_recovery"), baseline("tent", "mean_recovery"),
              _gap("forge"), _gap("kept_bn"), baseline("forge", "mean_recovery"))


def _result(md: str, *keys: Any, then: Callable[[Any], Any] = _same) -> Json:
  return Json(_json(md), ("results",) + keys, then)


# The experiments run again with `--targets=recorded` (or before measured targets were
# the default) keep that run here: results/recorded_targets/NAME/.
RECORDED = "results/recorded_targets/"


def _twin(md: str) -> str:
  """results/NAME/result.md -> its recorded-target run's."""
  return RECORDED + md[len("results/"):]


def _same_design(targets: str) -> str:
  return "= ours" if targets == "recorded" else f"not run (ours: {targets})"


def _design_of(md: str) -> Ours:
  """For an experiment run once: "= ours" where that run had recorded targets."""
  return ours("{}", Json(_json(md), ("targets",), _same_design))


def _corrupted(streams: dict) -> list:
  # The gate's streams include the clean one; the paper counts corruptions only.
  return [s for s in streams if s != "clean"]


def _fired(fired: dict) -> int:
  return sum(bool(fired[s]) for s in _corrupted(fired))


def _percent(fraction: float) -> float:
  return 100 * fraction


def _accuracy_recovery(method: str) -> Ours:
  return ours("{:.1f} / {:+.1f}", baseline(method, "mean_accuracy"),
              baseline(method, "mean_recovery"))


def _memory(target: str, artifact: str, column: str) -> MdCell:
  return MdCell(MEM, (target, artifact), column)


_TARGETS = "of which targets (beta, abs(gamma))"
_SITES = ("FORGE, 21 sites", "FORGE, 3 sites")
_WIDTHS = ("W8/A8", "W6/A6", "W4/A8", "W4/A4")
_LOTV_BATCHES = (1, 2, 4, 8, 16, 32, 64)
_GATE_CORRUPTIONS = _result(G, "fired", then=lambda fired: len(_corrupted(fired)))
_CORRUPTIONS = ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur",
                "glass_blur", "motion_blur", "zoom_blur", "snow", "frost", "fog",
                "brightness", "contrast", "elastic_transform", "pixelate",
                "jpeg_compression", "mean")
# The paper's Table 4 row by row: source (fp32) / BN-adapt / TENT / FORGE.
_PAPER_PERCORR = (
    "25.6 / 59.7 / 67.3 / 60.3", "31.1 / 60.6 / 69.3 / 61.4", "30.8 / 54.0 / 61.1 / 54.3",
    "45.0 / 81.4 / 83.2 / 82.0", "40.6 / 56.5 / 60.5 / 56.6", "56.1 / 78.7 / 81.1 / 79.4",
    "49.5 / 80.3 / 83.2 / 80.6", "67.5 / 71.7 / 76.8 / 72.4", "52.1 / 71.7 / 76.3 / 72.4",
    "63.4 / 77.4 / 80.4 / 78.1", "86.8 / 84.8 / 87.1 / 85.7", "25.4 / 78.6 / 79.2 / 79.0",
    "67.4 / 68.2 / 71.7 / 68.9", "41.4 / 70.2 / 76.7 / 70.7", "69.0 / 66.2 / 71.3 / 67.2",
    "50.1 / 70.7 / 75.0 / 71.3")
_PERCORR_METHODS = ("source-fp32", "bn-adapt", "tent", "forge")
_FORGE_RECOVERY_STD = ours("{:+.1f} ({:.2f})", baseline("forge", "mean_recovery"),
                           baseline("forge", "mean_recovery_std"))

ROWS: tuple[PaperRow, ...] = (
    # tab:baselines
    PaperRow("tab:baselines", "source (fp32) accuracy", "50.1", ours("{:.1f}", baseline("source-fp32", "mean_accuracy")), B, "setting"),
    PaperRow("tab:baselines", "BN-adapt: accuracy / recovery", "70.7 / +20.6", _accuracy_recovery("bn-adapt"), B, "setting; BN-adapt below FORGE in both"),
    PaperRow("tab:baselines", "TENT: accuracy / recovery", "75.0 / +24.9", _accuracy_recovery("tent"), B, "setting; TENT leads FORGE by 4.0 there; here compare the FORGE row (measured and recorded targets)"),
    PaperRow("tab:baselines", "source (int8) accuracy", "50.4", ours("{:.1f}", baseline("source", "mean_accuracy")), B, "setting"),
    PaperRow("tab:baselines", "scale-adapt: accuracy / recovery", "50.0 / -0.4", _accuracy_recovery("scale-adapt"), B, "same: re-estimating int8 ranges recovers nothing"),
    PaperRow("tab:baselines", "FORGE: accuracy / recovery (std, 5 orderings)", "71.3 / +20.9 (0.04)",
             ours("{:.1f} / {:+.1f} ({:.2f})", *(baseline("forge", k) for k in ("mean_accuracy", "mean_recovery", "mean_recovery_std"))), B, "setting",
             ours("{:.1f} / {:+.1f} ({:.2f})", *(baseline("forge", k, _twin(B)) for k in ("mean_accuracy", "mean_recovery", "mean_recovery_std")))),
    PaperRow("tab:baselines", "CoTTA, continual protocol: recovery", "+13.9", None, "", "not implemented here (backprop + augmentation); the continual protocol itself runs: FORGE continual minus reset-each-shift -0.10, TENT -4.48 (benchmarks/results/field_protocols_fp32.md)"),
) + tuple(
    PaperRow("tab:percorr", f"{name}: source / BN-adapt / TENT / FORGE", paper,
             ours(" / ".join(["{:.1f}"] * 4), *(_per_corruption(m, name) for m in _PERCORR_METHODS)), P,
             "source is fp32 in the paper's table; ours fp32 source",
             ours("FORGE {:.1f}", _per_corruption("forge", name, _twin(P))))
    for name, paper in zip(_CORRUPTIONS, _PAPER_PERCORR, strict=True)
) + (
    PaperRow("tab:general", "ResNet-20, CIFAR-10-C: recovery", "+20.9 (0.04)", _FORGE_RECOVERY_STD, B, "setting",
             ours("{:+.1f} ({:.2f})", *(baseline("forge", k, _twin(B)) for k in ("mean_recovery", "mean_recovery_std")))),
    PaperRow("tab:general", "MobileNetV2, CIFAR-10-C: recovery", "+20.5 (0.09)",
             ours("{:+.1f}", _result(GEN, "rows", "MobileNetV2-0.5 on CIFAR-10", "forge_recovery")),
             GEN, "MobileNetV2-0.5, 2,000 images per corruption; both models recover alike in both",
             ours("{:+.1f}", _result(_twin(GEN), "rows", "MobileNetV2-0.5 on CIFAR-10", "forge_recovery"))),
    PaperRow("tab:general", "ResNet-20, CIFAR-100-C: recovery", "+14.5 (0.06)", None, "", "no CIFAR-100 data in ../shared; the experiment runs when it is there"),
    PaperRow("tab:general", "MobileNetV2, Tiny-ImageNet-C: recovery", "+11.0", None, "", "no Tiny-ImageNet data in ../shared"),
    # Our momentum grid differs from the paper's: the template names our nearest m.
    PaperRow("tab:abl-mom", "recovery at m = 0.01 / 0.03 / 0.1 / 0.3 / 1.0", "+20.2 / +20.4 / +20.8 / +20.7 / +20.1",
             ours("{:+.1f} / (0.02: {:+.1f}) / {:+.1f} / (0.2: {:+.1f}, 0.5: {:+.1f}) / {:+.1f}",
                  *(_result("results/momentum/result.md", "rows", m, "recovery") for m in ("0.01", "0.02", "0.1", "0.2", "0.5", "1.0"))),
             "results/momentum/result.md", "our grid is 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1; flat within 0.7 point, peak at 0.1 in both",
             _design_of("results/momentum/result.md")),
    PaperRow("tab:abl-bits", "clean accuracy 8/8, 6/6, 4/8, 4/4", "91.9 / 90.5 / 90.1 / 60.6", None, "results/bit-width/result.md", "clean accuracy per width not recorded by the experiment"),
    PaperRow("tab:abl-bits", "source accuracy 8/8, 6/6, 4/8, 4/4", "50.4 / 50.2 / 47.6 / 32.2",
             ours(" / ".join(["{:.1f}"] * 4), *(_result("results/bit-width/result.md", "rows", w, "source") for w in _WIDTHS)),
             "results/bit-width/result.md", "setting; sub-8-bit simulated on the int8 artifact"),
    PaperRow("tab:abl-bits", "recovery 8/8, 6/6, 4/8, 4/4", "+20.8 / +18.5 / +23.3 / +13.3",
             ours(" / ".join(["{:+.1f}"] * 4), *(_result("results/bit-width/result.md", "rows", w, "recovery") for w in _WIDTHS)),
             "results/bit-width/result.md", "same order: 4/8 most, 4/4 least",
             _design_of("results/bit-width/result.md")),
    PaperRow("tab:gate", "CIFAR-10-C: ungated (hurt) / fires / gated (hurt)", "+20.8 (2/15) / 12/15 / +21.0 (0/15)",
             ours("{:+.1f} ({}/{}) / {}/{} / {:+.1f} ({}/{})",
                  _result(G, "results", "forge", "summary", "mean_recovery"),
                  _result(G, "results", "forge", "summary", "hurt", then=len), _GATE_CORRUPTIONS,
                  _result(G, "fired", then=_fired), _GATE_CORRUPTIONS,
                  _result(G, "results", "forge-gated", "summary", "mean_recovery"),
                  _result(G, "results", "forge-gated", "summary", "hurt", then=len), _GATE_CORRUPTIONS),
             G, "different rule: the paper's confidence gain over W batches; ours the diversity gain (docs/decisions/gate-confidence-signals.md)",
             # The recorded-target run's gated figures came from an earlier controller.
             ours("ungated {:+.1f} ({}/{})",
                  _result(_twin(G), "results", "forge", "summary", "mean_recovery"),
                  _result(_twin(G), "results", "forge", "summary", "hurt", then=len), _GATE_CORRUPTIONS)),
    PaperRow("tab:gate", "CIFAR-100-C: ungated / fires / gated", "+14.4 (1/15) / 5/15 / +5.9 (0/15)", None, "", "no CIFAR-100 data; the C controller also takes at most 64 classes"),
    PaperRow("tab:gate", "Tiny-ImageNet-C: ungated / fires / gated", "+11.0 (0/15) / 0/15 / +0.0 (0/15)", None, "", "no Tiny-ImageNet data; at most 64 classes"),
    PaperRow("tab:energy", "inference / inference + adapt / overhead (mJ)", "121.7 / 130.0 / 8.3", None, "", "needs an ESP32-S3 board and a PPK2 (none here); verify-device --ppk2 prints this table"),
    # The paper's overhead is +7.7% of inference time; ours the instructions over plain.
    PaperRow("tab:energy", "inference / inference + adapt / overhead (ms)", "286.1 / 308.0 / 21.9",
             ours("instructions over plain int8, 21 sites: ESP32-S3 {:+.1f}% (ansi core), {:+.1f}% (S3 variant); Cortex-M4F {:+.1f}%",
                  MdCell(S3_COST, ("FORGE, 21 sites, ansi",), "vs plain"),
                  MdCell(S3_COST, ("FORGE, 21 sites, S3 variant",), "vs plain"),
                  MdCell(MCU_COST, ("FORGE, 21 sites",), "vs plain", section="an386")),
             S3_COST, "no board: emulated instructions under QEMU, not cycles or energy (the paper's overhead is +7.7% of inference time); the Cortex-M4F figure: benchmarks/results/mcu_cost.txt"),
    # Memory: the Cortex-M4F board (an386); the state and targets are alike on every target.
    PaperRow("memory", "running mean + var (SRAM), 21 sites / top-3", "6.1 KB / 0.9 KB",
             ours("{:,} B / {:,} B", *(_memory("an386", s, "state") for s in _SITES)), MEM, "same: 8 B per channel, 784 / 112 channels"),
    PaperRow("memory", "targets (beta, |gamma|) (flash), 21 sites / top-3", "6.1 KB / 0.9 KB",
             ours("{:,} B / {:,} B", *(MdCell(MEM, (s,), _TARGETS) for s in _SITES)), MEM, "same"),
    PaperRow("memory", "added by FORGE, 21 sites / top-3", "12.2 KB / 1.8 KB",
             ours("arena +{:,} B / +{:,} B (Cortex-M4F); .tflite +{:,} B / +{:,} B",
                  *(_memory("an386", s, "FORGE adds") for s in _SITES), *(MdCell(MEM, (s,), "vs plain") for s in _SITES)),
             MEM, "ours counts what TFLM really adds: op data and node bookkeeping in the arena, the op's tensors and options in the flatbuffer"),
    PaperRow("memory", "activation buffers (peak, inference)", "192 KB (fp32)",
             ours("arena_used {:,} B plain, {:,} B with FORGE (int8, Cortex-M4F)",
                  _memory("an386", "plain int8", "arena_used"), _memory("an386", _SITES[0], "arena_used")),
             MEM, "ours is int8 TFLM: FORGE's output and scratch fit under the plain model's peak"),
    PaperRow("TinyTTA", "adaptation memory / energy / hardware", "~6 KB SRAM + 6 KB flash / 8.3 mJ (6.8%) / ESP32-S3",
             ours("{:,} B + {:,} B / not measured / host, Cortex-M4F/M55 and ESP32-S3 under QEMU",
                  _memory("an386", _SITES[0], "state"), MdCell(MEM, (_SITES[0],), _TARGETS)),
             MEM, "TinyTTA's own entries are from its paper; nothing to measure here"),
    PaperRow("tab:lotv", "omitted variance at batch 1 / 2 / 4 / 8 / 16 / 32 / 64 (%)", "7.96 / 3.97 / 1.98 / 0.98 / 0.48 / 0.23 / 0.11",
             ours(" / ".join(["{:.2f}"] * len(_LOTV_BATCHES)), *(_result("results/lotv/result.md", "omitted_percent", str(b)) for b in _LOTV_BATCHES)),
             "results/lotv/result.md", "same 1/B law; ours over all 784 channels"),
    PaperRow("tab:lotv", "implied 1/std scaling error at batch 1 / 64 (%)", "4.73 / 0.05", None, "results/lotv/result.md", "not computed by the experiment (about half the omitted share)"),
    # The float top-1 is the bundled model's training log (no result file holds it).
    PaperRow("text", "clean accuracy: integer reference vs PyTorch path", "92.6 vs 92.2",
             ours("int8 {:.2f} (long stream source); float {:.1f}",
                  Json("benchmarks/results/long_stream.json", ("source_accuracy",), _percent),
                  Json("models/resnet20_cifar10.json", ("final_test_accuracy",), _percent)),
             "benchmarks/results/long_stream.txt", "our parity is per image: int8 vs float top-1 agreement 100% on the parity images (convert's manifest)"),
    PaperRow("text", "device logits vs integer reference", "max |diff| 0.0",
             ours("bit-exact, {}", Match("docs/results.md", r"^## Bit-exactness with the evaluator \(([^)]+)\)")),
             "docs/results.md", "host, Cortex-M and ESP32-S3 under QEMU; no board"),
)


def markdown(root: str, link_prefix: str = "../") -> list[str]:
  """The section's lines, "ours" read from the files under `root` (the repo);
  `link_prefix` takes a repo path to the report's folder."""
  lines = ["## The paper, table by table", "", setting_note().render(root), "",
           "A dash means nothing here measures it; the note says why. \"setting\": the"
           " difference is the stronger source described above.", "",
           TARGETS_NOTE, "",
           "| table | claim | paper | ours | recorded targets (the paper's design) | source"
           " | note |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
  for r in ROWS:
    value = r.ours.render(root) if r.ours is not None else "—"
    recorded = r.recorded.render(root) if r.recorded is not None else ""
    cells = (r.table, r.claim, r.paper, value, recorded, _source_link(r.source, link_prefix),
             r.note)
    # A "|" inside a cell would split the Markdown row.
    lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
  return lines + [""]


def _source_link(source: str, link_prefix: str) -> str:
  if not source:
    return ""
  name = source.split("/")[-2] if source.endswith("result.md") else source.split("/")[-1]
  return f"[{name}]({link_prefix}{source})"
