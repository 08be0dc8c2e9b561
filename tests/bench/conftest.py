"""The bench (bench/ at the top of the checkout) is no installed package: make it importable here
as it is for `python -m bench` run from the checkout (its generator processes run from there too)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
