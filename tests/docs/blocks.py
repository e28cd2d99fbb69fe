"""The fenced blocks of the README and the docs, as the docs tests read them.

A block is what a user would copy: its page, line, language, text, the section heading
above it, and the ``<!-- ci: ... -->`` marker right before it (blank lines between are
allowed). Markers say how CI runs a shell or Python block (docs/development.md, "Docs
that cannot rot"):

* no marker: a shell block runs in its page's *session* (all such blocks of the page, in
  order, in one bash process against a real broker: tests/streams/test_docs_sessions.py), and
  a Python block runs as it stands (tests/docs/test_blocks.py);
* ``<!-- ci: run by PATH -->``: the test or script at PATH runs it verbatim (it reads
  the block with ``block_under``);
* ``<!-- ci: not run: REASON -->``: it cannot run in CI, and REASON says why; its
  command lines are still checked (tests/docs/test_blocks.py: every ``dpstream``
  command parses, every script and flag exists).

A shell block made only of ``bench/`` commands is a measurement: it is checked like a
``not run`` block (the benches take minutes each; docs/performance.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "examples" / "README.md",
         *sorted(p for p in (ROOT / "docs").rglob("*.md"))]
SHELL = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$")
MARKER = re.compile(r"<!--\s*ci:\s*(?P<what>.*?)\s*-->", re.S)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
BENCH = re.compile(r"^(?:\.venv/bin/)?python3? bench/\S+\.py\b")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int                 # the opening fence's line, 1-based
    lang: str
    text: str
    heading: str              # the nearest heading above the block
    marker: str | None        # what follows "ci:" in the marker before it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def commands(self) -> list[str]:
        """The block's command lines: continuations joined, comments and blank lines
        dropped, heredoc bodies skipped."""
        out, pending, heredoc = [], "", None
        for raw in self.text.splitlines():
            if heredoc is not None:
                if raw.strip() == heredoc:
                    heredoc = None
                continue
            line = pending + raw.strip()
            if line.endswith("\\"):
                pending = line[:-1].rstrip() + " "
                continue
            pending = ""
            code = strip_comment(line)
            if code:
                out.append(code)
                if (m := re.search(r"<<-?\s*'?(\w+)'?", code)):
                    heredoc = m.group(1)
        return out

    @property
    def kind(self) -> str:
        """How CI treats it: session, run by, not run, or bench (module docstring)."""
        if self.marker is None:
            if self.lang in SHELL and self.commands and all(BENCH.match(c) for c in self.commands):
                return "bench"
            return "session"
        if self.marker.startswith("run by "):
            return "run by"
        if self.marker.startswith("not run:"):
            return "not run"
        return "unknown marker"


def strip_comment(line: str) -> str:
    """A shell line without its trailing ``# comment`` (a ``#`` inside quotes stays)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    out, heading, i = [], "", 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if (h := HEADING.match(lines[i])) and not m:
            heading = h.group(2)
        if not m:
            i += 1
            continue
        start, fence, lang = i, m.group("fence"), m.group("info").strip().split(" ")[0]
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        text = "\n".join(line[len(m.group("indent")):] for line in lines[i + 1:j]) + "\n"
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = None
        if k >= 0 and lines[k].strip().endswith("-->"):
            first = k
            while first > 0 and "<!--" not in lines[first]:
                first -= 1
            found = MARKER.search("\n".join(lines[first:k + 1]))
            marker = " ".join(found.group("what").split()) if found else None
        out.append(Block(page, start + 1, lang, text, heading, marker))
        i = j + 1
    return out


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


def block_under(page: str | Path, heading: str, lang: str | None = None, index: int = 0) -> Block:
    """The ``index``-th block (of ``lang``, if given) under the heading that starts with
    ``heading`` on ``page`` (a path relative to the repository)."""
    found = [b for b in blocks(ROOT / page) if b.heading.startswith(heading)
             and (lang is None or b.lang == lang)]
    if len(found) <= index:
        raise LookupError(f"no {lang or ''} block #{index} under '{heading}' in {page}")
    return found[index]


def session(page: str | Path) -> str:
    """The page's session: its unmarked shell blocks, in order, as one script."""
    return "".join(b.text for b in blocks(ROOT / page) if b.lang in SHELL and b.kind == "session")
