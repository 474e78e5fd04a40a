"""Energy per phase from a Nordic Power Profiler Kit II capture with the app's markers.

The ESP32-S3 app raises one GPIO for each inference (MicroInterpreter::Invoke) and
another around each FORGE op (esp32s3_app/main/Kconfig.projbuild); wired to the
PPK2's digital inputs, the Power Profiler app's CSV export holds, per sample, the
time, the current and the digital channels. Accepted layouts (the app's versions):

  Timestamp(ms),Current(uA),D0-D7          channels as 8 bits, D7 first ("00000011")
  Timestamp(ms),Current(uA),D0,D1,...,D7   one 0/1 column per channel
  Timestamp(ms),Current(uA),Bits           as D0-D7 (older releases)

Energy = supply voltage x the sum of current x sample period over the samples where
the marker is high (the PPK2 samples at a fixed rate, 100 kHz by default; the period
is the median timestamp step). Per image: inference + adapt = the inference marker's
interval; adapt overhead = the FORGE marker's intervals inside it; inference = the
difference. The paper's Table 10 layout: mJ, ms and mW (energy / time), mean and
standard deviation over images.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class Capture:
  t_s: np.ndarray          # float64 [n]
  current_a: np.ndarray    # float64 [n]
  digital: np.ndarray      # bool [n, 8]: D0..D7

  @property
  def period_s(self) -> float:
    return float(np.median(np.diff(self.t_s))) if len(self.t_s) > 1 else 0.0


# The Power Profiler app writes UTF-8 (a BOM is skipped); other bytes become U+FFFD and
# the line holding them is refused as malformed.
ENCODING = "utf-8-sig"
T_UNITS = {"timestamp(ms)": 1e-3, "timestamp(us)": 1e-6, "timestamp(s)": 1.0}
C_UNITS = {"current(ua)": 1e-6, "current(na)": 1e-9, "current(ma)": 1e-3}
BITS_COLUMNS = ("D0-D7", "BITS")
CHANNEL_COLUMNS = {f"D{k}": k for k in range(8)}


@dataclasses.dataclass(frozen=True)
class _Layout:
  columns: int
  t_scale: float
  c_scale: float
  bits: int | None         # the column with all 8 channels as bits, D7 first
  channels: dict           # column -> channel (one 0/1 column per channel)


def _layout(head: list[str]) -> _Layout:
  """Where the time, current and digital channels are; other columns are ignored."""
  if len(head) < 2 or not head[0].lower().startswith("timestamp") or \
      not head[1].lower().startswith("current"):
    raise ValueError(f"not a PPK2 export: header {','.join(head)[:80]!r} (want "
                     "Timestamp(ms),Current(uA),D0-D7)")
  t_scale = T_UNITS.get(head[0].lower().replace(" ", ""))
  c_scale = C_UNITS.get(head[1].lower().replace(" ", ""))
  if t_scale is None or c_scale is None:
    raise ValueError(f"unknown units in header {head[0]!r}, {head[1]!r}")
  bits = [i for i, h in enumerate(head) if h.upper() in BITS_COLUMNS]
  channels = {i: CHANNEL_COLUMNS[h.upper()] for i, h in enumerate(head)
              if h.upper() in CHANNEL_COLUMNS}
  if len(bits) > 1 or (bits and channels) or \
      len(set(channels.values())) != len(channels):
    raise ValueError(f"the PPK2 export names its digital channels twice: header "
                     f"{','.join(head)[:120]!r}")
  if not bits and not channels:
    raise ValueError("the PPK2 export has no digital channels (no D0-D7 or D0..D7 column; "
                     f"its columns: {', '.join(repr(h) for h in head[:12])}): enable them "
                     "in the Power Profiler app before exporting")
  return _Layout(len(head), t_scale, c_scale, bits[0] if bits else None, channels)


def _rows(reader):
  """(line number where the record starts, its fields), blank lines skipped;
  ValueError for what the csv module cannot split (an unclosed quote)."""
  while True:
    start = reader.line_num + 1
    try:
      row = next(reader)
    except StopIteration:
      return
    except csv.Error as e:
      raise ValueError(f"PPK2 CSV line {start}: {e} (an unclosed quote?)") from None
    if any("\n" in c or "\r" in c for c in row):
      raise ValueError(f"PPK2 CSV line {start}: a quoted field runs over the end of the "
                       "line (an unclosed quote?)")
    if row and any(c.strip() for c in row):
      yield start, row


def _number(text: str, what: str, lineno: int) -> float:
  try:
    v = float(text)
  except ValueError:
    raise ValueError(f"PPK2 CSV line {lineno}: {what} {text.strip()[:30]!r} is not a "
                     "number") from None
  if not math.isfinite(v):
    raise ValueError(f"PPK2 CSV line {lineno}: {what} {text.strip()[:30]!r} is not a "
                     "finite number")
  return v


def _digital(row: list[str], layout: _Layout, lineno: int) -> list[bool]:
  if layout.bits is not None:
    s = row[layout.bits].strip()
    if len(s) != 8 or set(s) - {"0", "1"}:
      raise ValueError(f"PPK2 CSV line {lineno}: digital channels {s[:30]!r} are not 8 "
                       "bits (D7 first, like 00000011)")
    return [s[7 - k] == "1" for k in range(8)]
  d = [False] * 8
  for i, k in layout.channels.items():
    if row[i].strip() not in ("0", "1"):
      raise ValueError(f"PPK2 CSV line {lineno}: D{k} is {row[i].strip()[:30]!r}, not 0 "
                       "or 1")
    d[k] = row[i].strip() == "1"
  return d


def read_capture(path_or_text: str, *, is_text: bool = False) -> Capture:
  """Reads a PPK2 CSV export (see module); ValueError with a one-line reason naming
  the file and line: a sample must have finite numbers, a current >= 0 and a time
  after the previous sample's."""
  if is_text:
    return _parse(io.StringIO(path_or_text, newline=""))
  try:
    f = open(path_or_text, newline="", encoding=ENCODING, errors="replace")
  except OSError as e:
    raise ValueError(f"cannot read {path_or_text}: {e.strerror}") from e
  with f:
    try:
      return _parse(f)
    except ValueError as e:
      raise ValueError(f"{path_or_text}: {e}") from e


def _parse(f) -> Capture:
  rows = _rows(csv.reader(f))
  head = next(rows, None)
  if head is None:
    raise ValueError("empty PPK2 CSV")
  layout = _layout([h.strip() for h in head[1]])
  t, cur, dig = [], [], []
  for lineno, row in rows:
    if len(row) != layout.columns:
      raise ValueError(f"PPK2 CSV line {lineno} is malformed: {len(row)} fields, the "
                       f"header has {layout.columns}: {','.join(row)[:60]!r}")
    t.append(_number(row[0], "timestamp", lineno))
    cur.append(_number(row[1], "current", lineno))
    if cur[-1] < 0:
      raise ValueError(f"PPK2 CSV line {lineno}: negative current {row[1].strip()[:30]}"
                       " (a device only draws current: check the wiring)")
    if len(t) > 1 and not t[-1] > t[-2]:
      raise ValueError(f"PPK2 CSV line {lineno}: timestamp {row[0].strip()[:30]} is not "
                       "increasing")
    dig.append(_digital(row, layout, lineno))
  if len(t) < 2:
    raise ValueError("the PPK2 CSV has fewer than 2 samples")
  t_s = np.asarray(t) * layout.t_scale
  if np.any(np.diff(t_s) <= 0):  # Steps below float64's resolution once in seconds.
    raise ValueError("PPK2 timestamps are not increasing once converted to seconds")
  return Capture(t_s, np.asarray(cur) * layout.c_scale, np.asarray(dig, bool))


def high_intervals(level: np.ndarray) -> list[tuple[int, int]]:
  """[start, end) sample ranges where `level` is high; a range cut by the capture's
  start or end is dropped (it is not a whole phase)."""
  x = np.concatenate([[False], level.astype(bool), [False]])
  edges = np.flatnonzero(np.diff(x.astype(np.int8)))
  ranges = list(zip(edges[::2].tolist(), edges[1::2].tolist()))
  return [(a, b) for a, b in ranges if a > 0 and b < len(level)]


@dataclasses.dataclass(frozen=True)
class PhaseEnergy:
  inference_j: np.ndarray   # per image, without FORGE's ops
  total_j: np.ndarray       # inference + adapt
  forge_j: np.ndarray       # adapt overhead
  inference_s: np.ndarray
  total_s: np.ndarray
  forge_s: np.ndarray
  forge_ops_per_image: np.ndarray


def phase_energy(cap: Capture, voltage: float, inference_channel: int = 0,
                 forge_channel: int = 1) -> PhaseEnergy:
  if not (math.isfinite(voltage) and voltage > 0):
    raise ValueError(f"supply voltage must be finite and > 0, got {voltage}")
  dt = cap.period_s
  with np.errstate(over="ignore"):  # Overflow is refused below, with a reason.
    energy = cap.current_a * voltage * dt  # J per sample
  frames = high_intervals(cap.digital[:, inference_channel])
  if not frames:
    raise ValueError(f"no complete pulse on D{inference_channel} (the inference marker): "
                     "check the wiring and the channel")
  forge_level = cap.digital[:, forge_channel]
  total, forge, t_total, t_forge, n_ops = [], [], [], [], []
  for a, b in frames:
    inside = forge_level[a:b]
    total.append(energy[a:b].sum())
    forge.append(energy[a:b][inside].sum())
    t_total.append((b - a) * dt)
    t_forge.append(inside.sum() * dt)
    n_ops.append(len(high_intervals(np.concatenate([[False], inside, [False]]))))
  total, forge = np.array(total), np.array(forge)
  t_total, t_forge = np.array(t_total), np.array(t_forge)
  pe = PhaseEnergy(total - forge, total, forge, t_total - t_forge, t_total, t_forge,
                   np.array(n_ops))
  if not all(math.isfinite(v) for row in _phases(pe) for stat in row[1:] for v in stat):
    raise ValueError("the energy per image or its statistics are not finite: the "
                     "capture's currents or timestamps are too large for float64")
  return pe


def _phases(pe: PhaseEnergy) -> list[tuple]:
  """Per phase: name, then (mean, std) of energy (mJ), time (ms) and power (mW)."""
  out = []
  with np.errstate(over="ignore", invalid="ignore"):  # Checked by phase_energy.
    for name, e, t in (("inference", pe.inference_j, pe.inference_s),
                       ("inference + adapt", pe.total_j, pe.total_s),
                       ("adapt overhead", pe.forge_j, pe.forge_s)):
      p = np.divide(e, t, out=np.zeros_like(e), where=t > 0)
      out.append((name, *[(1e3 * float(a.mean()), 1e3 * float(a.std())) for a in (e, t, p)]))
  return out


def table10(pe: PhaseEnergy) -> str:
  """Markdown: inference, inference + adapt, adapt overhead (mJ, ms, mW)."""
  out = [f"Energy per image over {len(pe.total_j)} images (mean ± std):", "",
         "| phase | energy (mJ) | time (ms) | power (mW) |", "| --- | ---: | ---: | ---: |"]
  for name, e, t, p in _phases(pe):
    out.append(f"| {name} | {e[0]:.4f} ± {e[1]:.4f} | {t[0]:.3f} ± {t[1]:.3f} | "
               f"{p[0]:.2f} ± {p[1]:.2f} |")
  share = pe.forge_j.sum() / pe.total_j.sum() if pe.total_j.sum() > 0 else 0.0
  out += ["", f"adapt overhead: {100 * share:.2f}% of the energy of inference + adapt"]
  return "\n".join(out)
