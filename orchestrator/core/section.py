"""One section of decisions.md: a title and its markdown lines.

Every producer of evidence (the levers, the correctness gate, the profiles, a recipe's report)
returns ``Section`` values, or a list of them where a section is optional, and
:func:`orchestrator.analysis.decisions_md.render_decisions` prints them in order.
"""

from __future__ import annotations

from typing import NamedTuple


class Section(NamedTuple):
    title: str
    lines: list[str]
