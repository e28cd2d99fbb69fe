"""The documentation site builds with ``mkdocs build --strict`` (no broken link or anchor,
no missing API page), every module has its API entry and its row in the module map, and
no link or path named in the README, the docs, a docstring or a comment points at a file
that is not there (issue 44).

Before: 22 references pointed at a design.md that is not in the repository,
examples/README.md at a demo module under a path that never existed, and three
docstrings at files renamed long before (agents' handlers, learners' river module,
bench's factorization script)."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .blocks import FENCE, PAGES, ROOT, block_under

LAYERS = ("mechanisms", "learners", "agents", "schemas", "streams")
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
# a repository path: one of our top-level folders (or the package name before it, a path
# that does not exist in the repository), then a file with a known extension; not part
# of a longer path (faust/streams/stream.py is faust's, not ours)
REPO_PATH = re.compile(r"(?<![\w/.-])((?:dpstream/)?(?:mechanisms|learners|agents|streams|schemas|bench|scripts|tests|docs|examples)"
                       r"/[\w./-]*\w\.(?:py|md|sh|json|jsonl|java|csv|yml|toml))\b")


def modules() -> list[tuple[str, Path]]:
    out = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if path.name in ("__init__.py", "__main__.py"):
                continue
            out.append((".".join(["dpstream", *rel.with_suffix("").parts]), rel))
    return out


def test_the_site_builds_strict(tmp_path):
    """docs/development.md's build command: every page in the nav, every link and anchor
    found, every ``::: module`` of the API reference collected from the source (the
    command as written, with this interpreter's mkdocs and the site written to tmp)."""
    words = shlex.split(block_under("docs/development.md", "The documentation site", "bash").commands[0])
    assert words[1:] == ["build", "--strict"]
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run([str(mkdocs), *words[1:], "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-5000:]
    page = (tmp_path / "site" / "reference" / "learners" / "index.html").read_text()
    assert "DPFTRLClassifier" in page and '<span class="gp">&gt;&gt;&gt; </span>' in page   # doctests as code


def test_every_module_has_its_api_entry():
    """Each module appears as ``::: dpstream.x.y`` on its layer's reference page."""
    listed = set()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        listed |= set(re.findall(r"^::: (\S+)", page.read_text(), re.M))
    missing = [name for name, _ in modules() if name not in listed]
    assert missing == [], f"add to docs/reference/: {missing}"
    assert not {n for n in listed if not n.endswith(tuple(LAYERS)) and n not in dict(modules())} - \
        {n for n in listed if (ROOT / "/".join(n.split(".")[1:]) / "__init__.py").exists()}


def test_the_module_map_names_every_module():
    """The architecture page's module map lists each module by its path."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = [str(rel) for _, rel in modules() if f"`{rel}`" not in text]
    assert missing == [], f"add to the module map of docs/architecture.md: {missing}"


def slug(heading: str) -> str:
    """The anchor GitHub and MkDocs (toc's default) give a heading."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[\s]+", "-", text)


def prose(text: str) -> str:
    """The page without its fenced blocks and inline code."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group("fence")
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        out.append(re.sub(r"`[^`\n]*`", "", line))
    return "\n".join(out)


def anchors(page: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*$", prose(page.read_text()), re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    """A relative link points at a file that exists, and its #anchor at a heading there."""
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert broken == []


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    return [ROOT / n for n in names if n.endswith((".py", ".md", ".sh", ".toml", ".yml", ".java"))
            or n in ("Dockerfile", ".ci/run")]


def test_every_repository_path_named_anywhere_exists():
    """Docs, docstrings and comments name files by their paths; each must exist (a
    placeholder with <...> or * is not a path)."""
    missing = []
    for path in tracked_text_files():
        if not path.exists():
            continue
        for m in REPO_PATH.finditer(path.read_text(errors="replace")):
            if not (ROOT / m.group(1)).exists():
                missing.append(f"{path.relative_to(ROOT)}: {m.group(1)}")
    assert missing == []


def test_no_reference_to_a_design_file_outside_the_repository():
    """The design notes are not in the repository: a reference to them is a dead end."""
    found = [f"{p.relative_to(ROOT)}:{i}" for p in tracked_text_files() if p.exists()
             for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if "design.md" in line and p.name != "test_site.py"]
    assert found == []


def test_the_readme_picture_is_the_home_pages():
    """One picture of the whole system, the same in the README and on the site's home."""
    picture = re.compile(r"```mermaid\n.*?```", re.S)
    readme = picture.search((ROOT / "README.md").read_text()).group(0)
    home = picture.search((ROOT / "docs" / "index.md").read_text()).group(0)
    assert readme == home and "auditor" in readme and "ledger" in readme


def test_the_readme_stays_a_short_guide():
    """A user's guide of about 250 lines: depth goes to the docs, measurements to the
    performance page (before: 1,301 lines, 36% of them measurements)."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 260


def test_every_parameter_of_every_kind_is_documented():
    """docs/model-kinds.md has a section per kind whose table names each of its params
    (a parameter added to a kind and not documented fails here)."""
    from dpstream.agents.kinds import KINDS
    text = (ROOT / "docs" / "model-kinds.md").read_text()
    missing = []
    for name, kind in KINDS.items():
        start = text.index(f"## `{name}`")
        section = text[start:text.find("\n## ", start + 1)]
        missing += [f"{name}.{f}" for f in kind.Params.model_fields if f != "kind" and f"`{f}`" not in section]
    assert missing == []
