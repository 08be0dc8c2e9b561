"""Whole numbers as clients write them in text (query strings, forms, command lines).

``str.isdigit`` and ``int`` also take other scripts' digits (``"²"``, ``"\\uff11"``), on which
``int`` either fails or reads a number the client did not mean, and ``int`` refuses very long
inputs: so a number is ASCII digits, bounded in length, checked before ``int`` sees it.
"""

from __future__ import annotations

import re

__all__ = ["whole_number"]

_UNSIGNED = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"-?[0-9]+")


def whole_number(text: str, max_digits: int, *, signed: bool = False) -> int | None:
    """``text`` as an int when it is at most ``max_digits`` ASCII digits (after a ``-`` if
    ``signed``); None otherwise."""
    digits = len(text) - (signed and text.startswith("-"))
    if not 1 <= digits <= max_digits or not (_SIGNED if signed else _UNSIGNED).fullmatch(text):
        return None
    return int(text)
