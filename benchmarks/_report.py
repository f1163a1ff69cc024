"""Writing the benchmarks' reports: markdown tables and figures (no side effects on import,
unlike ``_bench``, which pins BLAS threads)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[object]], cell: Callable[[object], str] = str
) -> str:
    """A GitHub markdown table; ``cell`` formats each value."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (its folder made if missing); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def save_figure(fig: Any, path: Path, dpi: int = 110) -> None:
    """Lay out ``fig``, save it to ``path`` (its folder made if missing) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
