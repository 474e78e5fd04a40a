"""Which of the found Conv->BN sites get FORGE_RECALIB (`ConvertOptions.sites`)."""

from __future__ import annotations

from forge_tflm.converter.sites import BNSite, ConversionError


def _show(name: str) -> str:
  """A site name as an error line shows it: cut, and quoted if it is not printable."""
  return name[:60] if name.isprintable() else repr(name[:60])


def select_sites(found: list[BNSite], wanted) -> list[BNSite]:
  """`wanted` is "all", "none" or site names; the result keeps the model's order."""
  if wanted == "all":
    return list(found)
  if wanted == "none":
    return []
  by_name = {s.name: s for s in found}
  unknown = [n for n in wanted if n not in by_name]
  if unknown:
    more = f" and {len(unknown) - 5:,} more" if len(unknown) > 5 else ""
    raise ConversionError(f"unknown site(s) {', '.join(map(_show, unknown[:5]))}{more};"
                          f" the model's sites are: {', '.join(by_name)}")
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
  seen = set()
  for n in names:  # Linear: list.count per name hung on a 1 MB file.
    if n in seen:
      raise ConversionError(f"sites file {path}: site {n[:60]!r} is listed twice")
    seen.add(n)
  return tuple(names)
