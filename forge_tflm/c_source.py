"""Pieces of generated C/C++ source shared by the converter's and the firmware
exporter's model arrays."""

from __future__ import annotations

import json


def comment_text(text: str) -> str:
  """`text` as it may follow `//` on one line: as is when it is printable ASCII and does
  not end in a backslash (which would splice the next line into the comment), else as
  a quoted, escaped string (a newline in a command argument must not end the comment
  and turn the rest of the command into code)."""
  if text.isascii() and text.isprintable() and not text.endswith("\\"):
    return text
  return json.dumps(text)


_HEX = tuple(f"0x{b:02x}" for b in range(256))


def byte_rows(data: bytes, per_line: int = 12, indent: str = "    ") -> str:
  """`0x..,` initializer rows of `data`."""
  hexes = list(map(_HEX.__getitem__, data))  # One lookup per byte: ~6x a format call.
  return "\n".join(indent + ", ".join(hexes[i:i + per_line]) + ","
                   for i in range(0, len(hexes), per_line))
