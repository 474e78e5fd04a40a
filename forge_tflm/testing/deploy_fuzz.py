"""Mutation fuzz of verify-device's inputs: device logs and PPK2 captures (issue 34).

Each mutant goes through the code `forge_tflm verify-device` runs on it: a log's bytes
through verify.decode_log, verify() against its seed's expected.json (read by
export.load_expected) and the report; a CSV's bytes through ppk2.ENCODING,
read_capture, phase_energy and table10. In-process (the code under test is Python and
numpy: nothing here can abort), deterministic in (run seed, index).

Seeds: two genuine logs, printed line for line as forge_app.cc prints them
(device_logs): "adapt" (every checksum, a tensor dump) and "gated"
(paths, probe decisions; a model with op names repeated: cost_type totals); two PPK2 exports of a known profile, one per channel layout
("bits": D0-D7, "columns": D0,...,D7). Mutators:
  value   a field (log) or cell (CSV) set to an interesting value or one derived
          from it (+-1, a digit or hex digit changed, a list element dropped,
          doubled or swapped, another record's value);
  token   (logs) a key=value word dropped, doubled, swapped or its key renamed;
  line    a line dropped, doubled, swapped, moved, cut, or a reset banner, a second
          header, a noise or record line inserted (CSV: a row, a blank line, a
          quote, the header's units or columns changed);
  bytes   1-4 bytes replaced, inserted or deleted; trunc: the file cut anywhere.

Outcomes. Logs: verified (BIT-EXACT), not_verified, rejected (a one-line
ValueError); CSVs: accepted, rejected. Failures: error (any other exception, a
message or report problem over several lines) and contradiction: a log verified
although a field verify-device compares differs from the genuine log's (an oracle
independent of the parser: the compared fields' text, record kind by record kind),
or a capture accepted with an energy or time that is not finite and >= 0, FORGE's
share above the whole, or a sample line holding a current that is not a finite
number >= 0.

  python -m forge_tflm.testing.deploy_fuzz --mutants=2000     # summary JSON
"""

from __future__ import annotations

import collections
import json
import math
import os
import random
import re
import sys
import tempfile
import time
import traceback

from forge_tflm.deploy import ppk2
from forge_tflm.deploy.export import load_expected
from forge_tflm.deploy.report import RECORDS, SCHEMA
from forge_tflm.deploy.verify import GATE_TOLERANCE_E6, decode_log, verify
from forge_tflm.testing import device_logs

LOG_OUTCOMES = ("verified", "not_verified", "rejected", "error", "contradiction")
CSV_OUTCOMES = ("accepted", "rejected", "error", "contradiction")
FAILURES = ("error", "contradiction")
LOG_MUTATORS = ("value", "token", "line", "bytes", "trunc")
CSV_MUTATORS = ("value", "line", "bytes", "trunc")

# Fields verify-device does not compare with expected.json or derive from other lines
# (measurements, settings, the build's arena); the oracle ignores them. Compared: mem's
# forge_state and states (the export's), cost's index, name, calls (every op once per
# invoke), ticks (their sums are the cost_type lines'), done's ticks (the img ticks'
# sum; an img's ticks alone is a measurement). The gated seed's FORGE checksums have
# no expectation.
UNCOMPARED_KINDS = {"tensor"}
UNCOMPARED = {"forge_app": {"clock_hz", "fc_guard", "input", "output", "trace"},
              "mem": {"arena_size", "arena_used", "forge_persistent", "forge_scratch"},
              "img": {"ticks"}}
UNCOMPARED_GATED = {"img": {"forge", "state"}}
GATE_E6 = ("score_e6", "agreement_e6", "chance_e6")

INTERESTING = ["", "0", "1", "-1", "-0", "00", "01", "+1", " 1", "127", "128", "-128",
               "-129", "255", "256", "3072", "1234", "4294967295", "4294967296",
               "18446744073709551615", "18446744073709551616", "9" * 30, "1e12", "1.5",
               "nan", "inf", "-inf", "0x10", "ffffffff", "1ffffffff", "FFFFFFFF",
               "0000000g", "deadbeef", "00000000", "on", "off", "ok", "error", "adapt",
               "gated", "frozen", "source", "none", "all", "forge", "1x10", "1x32x32x3",
               "0x0", "?", "\uff11", "1_0", ",", "1,", ",1", "1,,2", "=", "a=b", "\ufffd"]
CSV_INTERESTING = ["", "0", "-0", "1", "-1", "-3.5", "nan", "NaN", "inf", "-inf",
                   "Infinity", "1e308", "1e-320", "1e300", "0x1", "1_0", " 2", "2",
                   "00000011", "0000001", "000000111", "0000000x", "11111111", '"',
                   '"1"', '"1', "1,2", "\x00", "\ufffd", "Timestamp(ms)", "D0"]
RESET_LINES = ["Rebooting...", "ESP-ROM:esp32s3-20210327",
               "rst:0xc (RTC_SW_CPU_RST),boot:0x8 (SPI_FAST_FLASH_BOOT)",
               "Guru Meditation Error: Core  0 panic'ed (LoadProhibited)",
               "abort() was called at PC 0x42001234 on core 0", "Backtrace: 0x4037"]
NOISE_LINES = ["I (1234) main: starting", "W (99) spi_flash: detected chip", "",
               "op", "done", "img = 3", "error", "error what=invoke image=2",
               "tensor image=0 op=1 offset=0 bytes=4 values=1,2,3,4",
               "gate image=0 decision=on score_e6=1 correlated=0 agreement_e6=0 "
               "chance_e6=0", "mem arena_size=1"]


# -- seeds --------------------------------------------------------------------------


def log_seeds() -> dict:
  """name -> (genuine log bytes, its expected.json as load_expected reads it)."""
  seeds = {}
  with tempfile.TemporaryDirectory() as d:
    for mode in ("adapt", "gated"):
      exp = device_logs.expected_doc(
          mode, ops=device_logs.OPS_REPEATED if mode == "gated" else device_logs.OPS)
      text = device_logs.app_log(exp)
      if mode == "adapt":  # A tensor dump (dump_op) between image 0 and image 1.
        cut = text.index("img index=1 ")
        text = (text[:cut] + "tensor image=0 op=2 offset=0 bytes=6 values=1,-2,3\n"
                "tensor image=0 op=2 offset=3 bytes=6 values=4,5,-128\n" + text[cut:])
      path = os.path.join(d, f"{mode}.json")
      with open(path, "w") as f:
        json.dump(exp, f)
      seeds[mode] = (text.encode(), load_expected(path))
  return seeds


def capture_text(layout: str, rate: int = 2000, images: int = 3) -> str:
  """A PPK2 export of a known profile (idle 10 mA; per image 10 ms at 50 mA with the
  inference marker D0 high, two 1 ms FORGE pulses on D1 at 80 mA)."""
  rows, k = [], 0

  def emit(ms, ma, d0, d1):
    nonlocal k
    for _ in range(round(ms * 1e-3 * rate)):
      t = k / rate * 1e3
      bits = f"000000{d1}{d0}" if layout == "bits" else f"{d0},{d1},0,0,0,0,0,0"
      rows.append(f"{t:.5f},{ma * 1e3:.3f},{bits}")
      k += 1

  emit(5, 10, 0, 0)
  for _ in range(images):
    for ms, ma, d1 in ((3, 50, 0), (1, 80, 1), (3, 50, 0), (1, 80, 1), (2, 50, 0)):
      emit(ms, ma, 1, d1)
    emit(5, 10, 0, 0)
  head = ("Timestamp(ms),Current(uA),D0-D7" if layout == "bits" else
          "Timestamp(ms),Current(uA),D0,D1,D2,D3,D4,D5,D6,D7")
  return "\n".join([head] + rows) + "\n"


def csv_seeds() -> dict:
  return {layout: capture_text(layout).encode() for layout in ("bits", "columns")}


# -- mutations ----------------------------------------------------------------------


def _derived(rng: random.Random, value: str, others: list[str]) -> str:
  """A value near `value`: +-1, a character changed, a list element dropped, doubled
  or swapped, or another record's value of the same field."""
  items = value.split(",")
  choice = rng.randrange(6)
  k = rng.randrange(len(items))
  if choice == 0 and others:
    return rng.choice(others)
  if choice == 1:
    try:
      items[k] = str(int(items[k]) + rng.choice((-1, 1)))
    except ValueError:
      items[k] = f"{(int(items[k], 16) ^ (1 << rng.randrange(32))) & 0xFFFFFFFF:08x}" \
          if len(items[k]) == 8 and all(c in "0123456789abcdef" for c in items[k]) \
          else items[k] + "0"
  elif choice == 2 and items[k]:
    i = rng.randrange(len(items[k]))
    items[k] = items[k][:i] + rng.choice("0123456789abcdef-x ") + items[k][i + 1:]
  elif choice == 3:
    del items[k]
  elif choice == 4:
    items.insert(k, items[k])
  else:
    j = rng.randrange(len(items))
    items[k], items[j] = items[j], items[k]
  return ",".join(items)


def _record_lines(lines: list[str]) -> list[int]:
  return [i for i, line in enumerate(lines) if line.split()[:1] and
          line.split()[0] in RECORDS]


def _mutate_value(rng, lines) -> str:
  i = rng.choice(_record_lines(lines))
  words = lines[i].split(" ")
  k = rng.randrange(1, len(words)) if len(words) > 1 else 0
  key, _, value = words[k].partition("=")
  others = [w.partition("=")[2] for line in lines for w in line.split(" ")[1:]
            if w.startswith(key + "=")]
  new = rng.choice(INTERESTING) if rng.random() < 0.4 else _derived(rng, value, others)
  words[k] = f"{key}={new}"
  lines[i] = " ".join(words)
  return f"line {i + 1} {key}={new[:30]!r}"


def _mutate_token(rng, lines) -> str:
  i = rng.choice(_record_lines(lines))
  words = lines[i].split(" ")
  k = rng.randrange(1, len(words))
  op = rng.randrange(5)
  if op == 0:
    del words[k]
  elif op == 1:
    words.insert(k, words[k])
  elif op == 2:
    j = rng.randrange(len(words))
    words[k], words[j] = words[j], words[k]
  elif op == 3:
    kind = rng.choice(RECORDS)
    keys = [key.rstrip("?") for key in (SCHEMA[kind] or {"what": None})] + ["x", ""]
    words[k] = rng.choice(keys) + "=" + words[k].partition("=")[2]
  else:
    words[k] = words[k].replace("=", rng.choice(("", " ", "==", ":")), 1)
  lines[i] = " ".join(words)
  return f"line {i + 1} token {k} op {op}"


def _mutate_line(rng, lines, other: list[str]) -> str:
  op = rng.randrange(8)
  i = rng.randrange(len(lines))
  if op == 0:
    del lines[i]
  elif op == 1:
    lines.insert(i, lines[i])
  elif op == 2 and i + 1 < len(lines):
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
  elif op == 3:
    lines.insert(rng.randrange(len(lines) + 1), lines.pop(i))
  elif op == 4:
    lines[i] = lines[i][:rng.randrange(len(lines[i]) + 1)]
  elif op == 5:
    lines.insert(i, rng.choice(RESET_LINES))
  elif op == 6:
    lines.insert(i, rng.choice(NOISE_LINES + [other[rng.randrange(len(other))]]))
  else:
    header = next(line for line in lines + other if line.startswith("forge_app "))
    lines.insert(i, header)
  return f"line {i + 1} op {op}"


def _mutate_bytes(rng, data: bytes) -> tuple[bytes, str]:
  b = bytearray(data)
  for _ in range(rng.randint(1, 4)):
    i = rng.randrange(len(b) + 1)
    v = rng.choice((0, 10, 13, 32, 34, 44, 61, 0xFF, 0xC3, rng.randrange(256)))
    op = rng.randrange(3)
    if op == 0 and i < len(b):
      b[i] = v
    elif op == 1:
      b.insert(i, v)
    elif i < len(b):
      del b[i]
  return bytes(b), "bytes"


def mutate_log(seeds: dict, index: int, run_seed: int = 0):
  """(seed name, mutator, description, mutant bytes), deterministic in the arguments."""
  rng = random.Random(f"log:{run_seed}:{index}")
  name = sorted(seeds)[index % len(seeds)]
  data = seeds[name][0]
  mutator = LOG_MUTATORS[rng.randrange(len(LOG_MUTATORS))]
  if mutator == "bytes":
    data, desc = _mutate_bytes(rng, data)
  elif mutator == "trunc":
    cut = rng.randrange(len(data))
    data, desc = data[:cut], f"cut at {cut}"
  else:
    lines = data.decode().splitlines()
    if mutator == "value":
      desc = _mutate_value(rng, lines)
    elif mutator == "token":
      desc = _mutate_token(rng, lines)
    else:
      other = seeds[sorted(seeds)[(index + 1) % len(seeds)]][0].decode().splitlines()
      desc = _mutate_line(rng, lines, other)
    data = ("\n".join(lines) + "\n").encode()
  return name, mutator, desc, data


def mutate_csv(seeds: dict, index: int, run_seed: int = 0):
  rng = random.Random(f"csv:{run_seed}:{index}")
  name = sorted(seeds)[index % len(seeds)]
  data = seeds[name]
  mutator = CSV_MUTATORS[rng.randrange(len(CSV_MUTATORS))]
  if mutator == "bytes":
    data, desc = _mutate_bytes(rng, data)
  elif mutator == "trunc":
    cut = rng.randrange(len(data))
    data, desc = data[:cut], f"cut at {cut}"
  else:
    lines = data.decode().splitlines()
    i = rng.randrange(len(lines))
    if mutator == "value":
      cells = lines[i].split(",")
      k = rng.randrange(len(cells))
      cells[k] = rng.choice(CSV_INTERESTING) if rng.random() < 0.6 else \
          _derived(rng, cells[k], [])
      lines[i] = ",".join(cells)
      desc = f"line {i + 1} cell {k}"
    else:
      desc = _mutate_csv_line(rng, lines, i)
    data = ("\n".join(lines) + "\n").encode()
  return name, mutator, desc, data


def _mutate_csv_line(rng, lines, i) -> str:
  op = rng.randrange(7)
  if op == 0:
    del lines[i]
  elif op == 1:
    lines.insert(i, lines[i])
  elif op == 2:
    lines.insert(i, rng.choice(("", ",", "\r", "a,b,c")))
  elif op == 3:
    j = rng.randrange(len(lines[i]) + 1)
    lines[i] = lines[i][:j] + '"' + lines[i][j:]
  elif op == 4:
    lines[i] = lines[i][:rng.randrange(len(lines[i]) + 1)]
  elif op == 5:
    lines[0] = lines[0].replace(rng.choice(("(ms)", "(uA)", "D0", "D1")),
                                rng.choice(("(s)", "(us)", "(nA)", "(mA)", "(x)", "D7", "")))
  else:
    extra = rng.choice(("Voltage(mV)", "D2", "D0-D7", "x"))
    lines[:] = [lines[0] + "," + extra] + [line + ",1" for line in lines[1:]]
  return f"line {i + 1} op {op}"


# -- oracles ------------------------------------------------------------------------


def compared_text(text: str, gated: bool) -> dict:
  """kind -> the compared fields' words of its records, in order (the oracle's view
  of what verify-device must find equal; not its parser)."""
  out = collections.defaultdict(list)
  skip = dict(UNCOMPARED)
  if gated:
    skip = {k: skip.get(k, set()) | UNCOMPARED_GATED.get(k, set())
            for k in set(skip) | set(UNCOMPARED_GATED)}
  for line in text.splitlines():
    words = line.split()
    if not words or words[0] not in RECORDS or words[0] in UNCOMPARED_KINDS or \
        not any("=" in w for w in words[1:]):
      continue
    # Sorted: the order of a record's fields carries no value.
    out[words[0]].append(sorted(w for w in words[1:]
                                if w.partition("=")[0] not in skip.get(words[0], ())))
  return dict(out)


def _same_gate_value(a: str, b: str) -> bool:
  key, _, va = a.partition("=")
  kb, _, vb = b.partition("=")
  if key != kb or key not in GATE_E6:
    return a == b
  try:
    return abs(int(va) - int(vb)) <= GATE_TOLERANCE_E6
  except ValueError:
    return False


def contradicts(mutant: str, genuine: str, gated: bool) -> str | None:
  got, want = compared_text(mutant, gated), compared_text(genuine, gated)
  if set(got) != set(want):
    return f"record kinds {sorted(got)} verified, the genuine log has {sorted(want)}"
  for kind in want:
    if len(got[kind]) != len(want[kind]):
      return f"{len(got[kind])} {kind} records verified, the genuine log has {len(want[kind])}"
    for g, w in zip(got[kind], want[kind]):
      same = (all(_same_gate_value(a, b) for a, b in zip(g, w)) if kind == "gate"
              else g == w)
      if len(g) != len(w) or not same:
        return f"{kind} record {' '.join(g)[:120]!r} verified as {' '.join(w)[:120]!r}"
  return None


def check_log(data: bytes, seed: tuple, gated: bool) -> tuple[str, str]:
  """(outcome, message) of verify-device on log bytes `data`."""
  genuine, expected = seed
  try:
    v = verify(decode_log(data), expected)
    v.markdown()
  except ValueError as e:
    return ("rejected" if str(e) and "\n" not in str(e) else "error"), str(e)
  except Exception as e:  # noqa: BLE001 (what the fuzz is for)
    return "error", f"{type(e).__name__}: {e} | {traceback.format_exc()[-600:]}"
  lines = v.problems + [v.first_divergence or ""]
  if any("\n" in p for p in lines):
    return "error", f"a report line over several lines: {lines!r}"[:600]
  if not v.ok:
    return "not_verified", (v.problems + [v.first_divergence or ""])[0]
  why = contradicts(decode_log(data), genuine.decode(), gated)
  return ("contradiction", why) if why else ("verified", "")


def _csv_contradiction(text: str, pe) -> str | None:
  arrays = {k: getattr(pe, k) for k in ("inference_j", "total_j", "forge_j", "inference_s",
                                         "total_s", "forge_s")}
  for k, a in arrays.items():
    if not all(math.isfinite(v) and v >= 0 for v in a.tolist()):
      return f"{k} {a.tolist()[:4]} accepted"
  if any(f > t * (1 + 1e-12) for f, t in zip(pe.forge_j.tolist(), pe.total_j.tolist())):
    return "FORGE's energy above the whole image's accepted"
  for n, line in enumerate(text.splitlines()[1:], 2):
    cells = line.split(",")
    try:
      current = float(cells[1])
    except (IndexError, ValueError):
      continue
    if not (math.isfinite(current) and current >= 0):
      return f"line {n} current {cells[1]!r} accepted"
  return None


def check_csv(data: bytes) -> tuple[str, str]:
  try:
    text = data.decode(ppk2.ENCODING, errors="replace")
    pe = ppk2.phase_energy(ppk2.read_capture(text, is_text=True), 3.3)
    table = ppk2.table10(pe)
  except ValueError as e:
    return ("rejected" if str(e) and "\n" not in str(e) else "error"), str(e)
  except Exception as e:  # noqa: BLE001
    return "error", f"{type(e).__name__}: {e} | {traceback.format_exc()[-600:]}"
  if re.search(r"\b(nan|inf)\b", table):
    return "contradiction", "a number in the table is not finite"
  why = _csv_contradiction(text, pe)
  return ("contradiction", why) if why else ("accepted", "")


# -- the run ------------------------------------------------------------------------


def fuzz(mutants: int, run_seed: int = 0, start: int = 0, progress=None) -> dict:
  """`mutants` logs and `mutants` CSVs (indices start..); a summary dict."""
  from forge_tflm.testing import artifact_fuzz as af

  logs, csvs = log_seeds(), csv_seeds()
  summary = {"mutants": mutants, "run_seed": run_seed, "start": start}
  t0, c0 = time.perf_counter(), time.process_time()
  for what, mutate, check, seeds, outcomes in (
      ("log", mutate_log, lambda name, d: check_log(d, logs[name], name == "gated"), logs,
       LOG_OUTCOMES),
      ("csv", mutate_csv, lambda name, d: check_csv(d), csvs, CSV_OUTCOMES)):
    summary[what] = af.in_process(
        lambda i, mutate=mutate, seeds=seeds: mutate(seeds, i, run_seed), check, mutants,
        start, outcomes, progress and (lambda done, counts, what=what: progress(
            what, done, counts)), run_seed)
  summary["wall_seconds"] = time.perf_counter() - t0
  summary["cpu_seconds"] = time.process_time() - c0
  return summary


def main(argv=None) -> int:
  from forge_tflm.testing import artifact_fuzz as af

  return af.in_process_main(
      fuzz, __doc__, argv, lambda s: any(s[w]["findings"] for w in ("log", "csv")))


if __name__ == "__main__":
  sys.exit(main())
