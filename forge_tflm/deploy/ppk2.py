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

import numpy as np


@dataclasses.dataclass(frozen=True)
class Capture:
  t_s: np.ndarray          # float64 [n]
  current_a: np.ndarray    # float64 [n]
  digital: np.ndarray      # bool [n, 8]: D0..D7

  @property
  def period_s(self) -> float:
    return float(np.median(np.diff(self.t_s))) if len(self.t_s) > 1 else 0.0


def read_capture(path_or_text: str, *, is_text: bool = False) -> Capture:
  """Reads a PPK2 CSV export (see module); ValueError with a one-line reason."""
  if is_text:
    f = io.StringIO(path_or_text)
  else:
    try:
      f = open(path_or_text, newline="")
    except OSError as e:
      raise ValueError(f"cannot read {path_or_text}: {e.strerror}") from e
  with f:
    reader = csv.reader(f)
    try:
      head = [h.strip() for h in next(reader)]
    except StopIteration:
      raise ValueError("empty PPK2 CSV") from None
    if len(head) < 2 or not head[0].lower().startswith("timestamp") or \
        not head[1].lower().startswith("current"):
      raise ValueError(f"not a PPK2 export: header {','.join(head)[:80]!r} (want "
                       "Timestamp(ms),Current(uA),D0-D7)")
    units = {"timestamp(ms)": 1e-3, "timestamp(us)": 1e-6, "timestamp(s)": 1.0}
    t_scale = units.get(head[0].lower().replace(" ", ""))
    c_scale = {"current(ua)": 1e-6, "current(na)": 1e-9, "current(ma)": 1e-3}.get(
        head[1].lower().replace(" ", ""))
    if t_scale is None or c_scale is None:
      raise ValueError(f"unknown units in header {head[0]!r}, {head[1]!r}")
    bits_col = len(head) == 3 and head[2].upper() in ("D0-D7", "BITS")
    channel_cols = [i for i, h in enumerate(head) if h.upper() in
                    {f"D{k}" for k in range(8)}]
    if not bits_col and not channel_cols:
      raise ValueError("the PPK2 export has no digital channels (enable them in the "
                       "Power Profiler app before exporting)")
    t, cur, dig = [], [], []
    for lineno, row in enumerate(reader, 2):
      if not row or all(not c.strip() for c in row):
        continue
      try:
        t.append(float(row[0]))
        cur.append(float(row[1]))
        d = [False] * 8
        if bits_col:
          s = row[2].strip()
          if len(s) != 8 or set(s) - {"0", "1"}:
            raise ValueError
          d = [s[7 - k] == "1" for k in range(8)]
        else:
          for i in channel_cols:
            d[int(head[i][1:])] = row[i].strip() == "1"
        dig.append(d)
      except (ValueError, IndexError):
        raise ValueError(f"PPK2 CSV line {lineno} is malformed: {','.join(row)[:60]!r}") \
            from None
  if len(t) < 2:
    raise ValueError("the PPK2 CSV has fewer than 2 samples")
  t_s = np.asarray(t) * t_scale
  if np.any(np.diff(t_s) <= 0):
    raise ValueError("PPK2 timestamps are not increasing")
  return Capture(t_s, np.asarray(cur) * c_scale, np.asarray(dig, bool))


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
  if not voltage > 0:
    raise ValueError(f"supply voltage must be > 0, got {voltage}")
  dt = cap.period_s
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
  return PhaseEnergy(total - forge, total, forge, t_total - t_forge, t_total, t_forge,
                     np.array(n_ops))


def table10(pe: PhaseEnergy) -> str:
  """Markdown: inference, inference + adapt, adapt overhead (mJ, ms, mW)."""
  rows = [("inference", pe.inference_j, pe.inference_s),
          ("inference + adapt", pe.total_j, pe.total_s),
          ("adapt overhead", pe.forge_j, pe.forge_s)]
  out = [f"Energy per image over {len(pe.total_j)} images (mean ± std):", "",
         "| phase | energy (mJ) | time (ms) | power (mW) |", "| --- | ---: | ---: | ---: |"]
  for name, e, t in rows:
    p = np.divide(e, t, out=np.zeros_like(e), where=t > 0)
    out.append(f"| {name} | {1e3 * e.mean():.4f} ± {1e3 * e.std():.4f} | "
               f"{1e3 * t.mean():.3f} ± {1e3 * t.std():.3f} | "
               f"{1e3 * p.mean():.2f} ± {1e3 * p.std():.2f} |")
  share = pe.forge_j.sum() / pe.total_j.sum() if pe.total_j.sum() > 0 else 0.0
  out += ["", f"adapt overhead: {100 * share:.2f}% of the energy of inference + adapt"]
  return "\n".join(out)
