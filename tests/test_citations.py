"""Every document or repository path cited in a tracked text file exists in the repository.

Code and docs cite only documents inside the repository: a reference to a markdown file,
to a repository path (``learners/apas.py``, ``docs/events.md``) or to a place outside the
checkout (the parent directory, an absolute path on a development machine) must resolve to
a tracked file or directory. Resolution follows how a reader looks a reference up: relative
to the citing file's directory, to the repository root, and, for a bare markdown file name
(``synthetic.md``), to any tracked file of that name under the citing file's directory.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".ini", ".sh", ".html"}
TEXT_NAMES = {"Makefile", "Dockerfile", ".env.example"}

# A path token: no '/', word character, '.', ':' or '-' right before it, so URLs, absolute
# container paths (/app/service/...) and dotted names are not taken apart.
_START = r"(?<![\w./:~-])"
_SEG = r"[A-Za-z0-9_.-]+"
MD_REF = re.compile(_START + rf"((?:\.\.?/)*(?:{_SEG}/)*{_SEG}\.md)(?![\w/-])")
# Any relative path with a directory and a file extension: ``shared/seeds/apas.txt``.
FILE_REF = re.compile(
    _START
    + rf"((?:\.\.?/)*(?:{_SEG}/)+{_SEG}\.(?:md|txt|py|csv|json|ya?ml|toml|png|gz|html|js|css))"
    r"(?![\w/-])"
)
# Places that can never be inside the repository: the parent directory and machine paths.
OUTSIDE_REF = re.compile(r"(?<![\w.-])((?:\.\./)+[\w.-]+[\w./-]*|/work/[\w./-]*)")


@cache
def tracked() -> frozenset[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return frozenset(p for p in out.split("\0") if p)


@cache
def tracked_dirs() -> frozenset[str]:
    dirs: set[str] = set()
    for p in tracked():
        parent = PurePosixPath(p).parent
        while str(parent) != ".":
            dirs.add(str(parent))
            parent = parent.parent
    return frozenset(dirs)


@cache
def top_level() -> frozenset[str]:
    return frozenset(d for d in tracked_dirs() if "/" not in d)


def repo_path_ref() -> re.Pattern[str]:
    """``<top-level dir>/...``: a path into the repository, e.g. ``service/store/keys.py``."""
    tops = "|".join(sorted(re.escape(t) for t in top_level() if not t.startswith(".")))
    return re.compile(_START + rf"((?:{tops})/(?:{_SEG}/)*{_SEG}/?)(?![\w/*<{{-])")


def exists(rel: str) -> bool:
    rel = rel.rstrip("/")
    return rel in tracked() or rel in tracked_dirs()


def normalise(base: PurePosixPath, ref: str) -> str | None:
    parts: list[str] = [] if str(base) == "." else list(base.parts)
    for part in PurePosixPath(ref).parts:
        if part == "..":
            if not parts:
                return None  # climbs out of the repository
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def resolves(source: str, ref: str) -> bool:
    here = PurePosixPath(source).parent
    for base in (here, PurePosixPath(".")):
        rel = normalise(base, ref)
        if rel is not None and exists(rel):
            return True
    if "/" not in ref:  # a bare file name: a tracked file of that name in the same part
        top = PurePosixPath(source).parts[0] if "/" in source else ""
        prefix = f"{top}/" if top else ""
        if any(p.startswith(prefix) and PurePosixPath(p).name == ref for p in tracked()):
            return True
    return generated(ref)


def generated(ref: str) -> bool:
    """A path the repository declares as generated (``.gitignore``d), e.g. ``node_modules``."""
    r = subprocess.run(["git", "check-ignore", "-q", "--no-index", ref], cwd=ROOT, check=False)
    return r.returncode == 0


def text_files() -> list[str]:
    own = str(Path(__file__).resolve().relative_to(ROOT))
    return sorted(
        p
        for p in tracked()
        if p != own
        and (PurePosixPath(p).suffix in TEXT_SUFFIXES or PurePosixPath(p).name in TEXT_NAMES)
    )


def dangling(source: str, text: str) -> list[str]:
    found: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in OUTSIDE_REF.finditer(line):
            ref = m.group(1).rstrip(".,;:")
            if ref.startswith("/work/") or normalise(PurePosixPath(source).parent, ref) is None:
                found.append(f"{source}:{lineno}: {ref} (outside the repository)")
            elif not resolves(source, ref):
                found.append(f"{source}:{lineno}: {ref}")
        for pattern in (MD_REF, FILE_REF, repo_path_ref()):
            for m in pattern.finditer(line):
                ref = m.group(1).rstrip(".")  # a full stop ends the sentence, not the path
                if not ref.startswith("../") and not resolves(source, ref):
                    found.append(f"{source}:{lineno}: {ref}")
    return list(dict.fromkeys(found))  # a path matched by two patterns is reported once


def test_every_cited_path_exists_in_the_repository() -> None:
    problems: list[str] = []
    for source in text_files():
        text = (ROOT / source).read_text(encoding="utf-8", errors="replace")
        problems.extend(dangling(source, text))
    assert not problems, "references to paths that are not in the repository:\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ("learners/apas.py", "implemented per ``spec/apas.md`` §2"),
        ("learners/apas.py", "seed ``shared/seeds/apas.txt``"),
        ("service/store/keys.py", '"""Redis keys (design.md, "Checkpoints")."""'),
        ("README.md", "see [the design](../shared/design.md)"),
        ("docs/events.md", "see `/work/shared/design.md`"),
        ("README.md", "`learners/no_such_learner.py`"),
        ("benchmarks/apas/speed.py", "(spec ``apas.md`` §5.7)"),
    ],
)
def test_dangling_references_are_found(source: str, text: str) -> None:
    assert dangling(source, text)


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ("README.md", 'contracts: `docs/design.md`, section "Events"'),
        ("docs/checkpoints.md", "see [events](events.md) and `design.md`"),
        ("learners/apas.py", '(``docs/algorithms/apas.md``, "Update equations")'),
        ("README.md", "`learners/`, `service/api/routes/`, `tests/service/`"),
        ("README.md", "https://github.com/x/y/blob/main/docs/nothing.md"),
        ("Dockerfile", "COPY --from=build /app/service/dashboard/static /srv/x"),
        ("benchmarks/README.md", "the table (`synthetic.md`, `synthetic.png`)"),
        ("README.md", "`benchmarks/<paper>/` and `tests/service/test_*.py`"),
    ],
)
def test_no_false_positives(source: str, text: str) -> None:
    assert dangling(source, text) == []
