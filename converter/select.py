"""Which of the found Conv->BN sites get FORGE_RECALIB (`ConvertOptions.sites`)."""

from __future__ import annotations

from forge_tflm.converter.sites import BNSite, ConversionError


def select_sites(found: list[BNSite], wanted) -> list[BNSite]:
  """`wanted` is "all", "none" or site names; the result keeps the model's order."""
  if wanted == "all":
    return list(found)
  if wanted == "none":
    return []
  by_name = {s.name: s for s in found}
  unknown = [n for n in wanted if n not in by_name]
  if unknown:
    raise ConversionError(f"unknown site(s) {', '.join(unknown)}; the model's sites are:"
                          f" {', '.join(by_name)}")
  chosen = set(wanted)
  return [s for s in found if s.name in chosen]


def read_sites_file(path: str) -> tuple[str, ...]:
  """The site names in sites file `path` (`forge_tflm select` writes {"sites": [...]};
  a plain JSON list works too); a one-line error naming the file otherwise."""
  from forge_tflm.fileio import check_input_file, load_json

  check_input_file(path, "sites file")
  data = load_json(path)  # Its errors name the file.
  names = data.get("sites") if isinstance(data, dict) else data
  if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
    raise ConversionError(f"sites file {path}: expected a JSON list of site names or"
                          " {\"sites\": [...]}")
  twice = [n for n in names if names.count(n) > 1]
  if twice:
    raise ConversionError(f"sites file {path}: site {twice[0]!r} is listed twice")
  return tuple(names)
