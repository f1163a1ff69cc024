"""Limits every side of the wire enforces alike (the API's schemas and the worker's decoder).

``MAX_ABS_VALUE`` bounds every feature, label and hint: with |v| <= 1e150, any product of
two values, and a sum of up to 100,000 such products (a dot product at ``max_dim``), stays
far inside the float64 range (1.8e308). A larger value can only be hostile or a unit
mistake; accepted, it overflows the learners' and the statistics' arithmetic, or (worse) a
learner takes it and every later prediction overflows (docs/events.md, "Values").
"""

from __future__ import annotations

MAX_ABS_VALUE = 1e150
