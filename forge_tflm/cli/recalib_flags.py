"""Command-line flags for FORGE's options, made from `RecalibOptions` itself.

Every field of RecalibOptions with a help text becomes a flag of the same name
(type from the C core's OPTION_FIELDS), so a new option needs no CLI code. All
default to unset: a command applies only the flags given, with
`RecalibOptions.replace` (which keeps momentum and window exclusive).
"""

from __future__ import annotations

from absl import flags

from forge_tflm.ops.options import ENUM_VALUES, FLAG_FIELDS, OPTION_FIELDS


def define_recalib_flags(fv: flags.FlagValues, prefix: str = "",
                         notes: dict[str, str] | None = None) -> None:
  """Defines --<field> for each option; `prefix` starts every help text and
  `notes` appends a command-specific sentence (e.g. its default) per field."""
  kinds = dict(OPTION_FIELDS)
  notes = notes or {}
  for field in FLAG_FIELDS:
    text = f"{prefix}{field.metadata['help']}"
    if field.name in notes:
      text += f" {notes[field.name]}"
    kind = kinds[field.name]
    if kind == "FLOAT":
      flags.DEFINE_float(field.name, None, text, flag_values=fv)
    elif kind == "INT":
      flags.DEFINE_integer(field.name, None, text, flag_values=fv)
    else:
      flags.DEFINE_enum(field.name, None, list(ENUM_VALUES[kind]), text, flag_values=fv)


def recalib_flag_values(fv: flags.FlagValues) -> dict:
  """{field: value} of the option flags that were given."""
  return {f.name: fv[f.name].value for f in FLAG_FIELDS if fv[f.name].value is not None}
