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
