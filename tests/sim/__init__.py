"""Deterministic simulation of the real worker over the in-memory ports (docs/reliability.md,
"Deterministic simulation"): one integer seed fixes the stream, the faults and every
interleaving. Run ``make sim SEEDS=N`` or ``python -m tests.sim --seed S``."""
