"""Every block a user would copy from the README or the docs is run by CI, or says why
not; every command line in them is real; every Python block runs (issue 44).

Before issue 44 four tests each cut one block out of the README by hand, and the other
26 shell blocks, the fast loop and the bench lists included, were never run or checked:
``bench/embedded.py``, which the README quoted for "22,001 inputs in about 1 s", had
failed with KeyError 'active' since the examples became raw records."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .blocks import ROOT, SHELL, all_blocks, block_under

BLOCKS = all_blocks()
RUNNABLE = [b for b in BLOCKS if b.lang in SHELL + ("python",)]
SHELL_BLOCKS = [b for b in BLOCKS if b.lang in SHELL]
KEY = "00112233445566778899aabbccddeeff" * 2
SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")", "<", ">", ">>", "<<", "2>", "2>&1"}


def ids(block) -> str:
    return block.where


def test_the_collector_finds_the_blocks_it_must():
    """The README's runnable blocks and a marked one are where the pages put them."""
    assert len(SHELL_BLOCKS) >= 15 and len([b for b in BLOCKS if b.lang == "python"]) >= 4
    secured = block_under("README.md", "Secure deployment", "bash")
    assert secured.kind == "run by" and "KAFKA_SECURE=1 scripts/kafka.sh start" in secured.text
    assert block_under("README.md", "Kafka quick start", "bash").kind == "session"


@pytest.mark.parametrize("block", RUNNABLE, ids=ids)
def test_every_block_is_run_or_says_why(block):
    """A marker names an existing test or script that reads the block, or a reason of a
    few words; anything else is a typo that would leave the block unrun."""
    assert block.kind != "unknown marker", (
        f"{block.where}: <!-- ci: {block.marker} -->: use 'run by PATH' or 'not run: REASON'")
    if block.kind == "run by":
        path = block.marker[len("run by "):].strip()
        runner = ROOT / path
        assert runner.is_file(), f"{block.where}: {path} does not exist"
        text = runner.read_text()
        if path == ".ci/run":
            lines = {line.strip() for line in text.splitlines()}
            assert all(c in lines for c in block.commands), f"{block.where} is not verbatim in .ci/run"
        else:
            assert block.page.name in text and "block_under(" in text, \
                f"{block.where}: {path} does not read the block with block_under"
    if block.kind == "not run":
        assert len(block.marker[len("not run:"):].strip()) >= 15, f"{block.where}: say why, in a few words"


def test_the_readmes_test_command_is_the_one_ci_runs():
    """CI installs exactly what the README's test command installs (.ci/run copies it)."""
    command = block_under("README.md", "Set up", "bash", index=1).commands
    assert command == ["python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && "
                       "scripts/kafka.sh start && .venv/bin/python -m pytest -n 4"]
    assert command[0] in (ROOT / ".ci" / "run").read_text().splitlines()


def _substituted(command: str) -> str:
    """``$(...)`` and ``${...}`` replaced by a placeholder word (their insides are other
    commands, checked where they stand alone)."""
    while True:
        out = re.sub(r"\$\((?:[^()]|\([^()]*\))*\)|\$\{[^}]*\}", "SUBST", command)
        if out == command:
            return out
        command = out


def segments(command: str) -> list[list[str]]:
    """The simple commands of a command line, each as its words (assignments dropped)."""
    lex = shlex.shlex(_substituted(command), posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    out, words = [], []
    for token in lex:
        if token in SEPARATORS or set(token) <= set("|&;()<>"):
            if words:
                out.append(words)
            words = []
            continue
        words.append(token)
    if words:
        out.append(words)
    return [[w for i, w in enumerate(ws) if not (re.match(r"^\w+=", w) and all(re.match(r"^\w+=", x) for x in ws[:i + 1]))]
            for ws in out]


def kafka_actions() -> set[str]:
    text = (ROOT / "scripts" / "kafka.sh").read_text()
    case = text[text.index('case "${1:-}" in'):]
    return set(re.findall(r"^\s+([a-z-]+)\)", case, re.M))


def problems(words: list[str]) -> str | None:
    """What is wrong with one simple command of the docs (None: nothing we can see)."""
    if not words:
        return None
    cmd, args = words[0], words[1:]
    if cmd.endswith("bin/dpstream") or cmd == "dpstream":
        from dpstream.streams.cli.commands import build_parser
        try:
            build_parser().parse_args(args)
        except SystemExit:
            return f"dpstream {' '.join(args)}: the parser refuses it"
        return None
    if re.search(r"(^|/)python3?$", cmd) and args:
        if args[0].startswith("bench/"):
            script = ROOT / args[0]
            if not script.is_file():
                return f"{args[0]} does not exist"
            flags = [a.split("=")[0] for a in args[1:] if a.startswith("--")]
            text = script.read_text()
            missing = [f for f in flags if not re.search(re.escape(f) + r"(?![\w-])", text)]
            return f"{args[0]} takes no {', '.join(missing)}" if missing else None
        if args[:2] == ["-m", "pytest"]:
            paths = [a.split("::")[0] for a in args[2:] if a.startswith("tests/")]
            missing = [p for p in paths if not (ROOT / p).exists()]
            return f"no {', '.join(missing)}" if missing else None
        if args[0] == "-m" and args[1].startswith("dpstream."):
            import importlib.util
            return None if importlib.util.find_spec(args[1]) else f"no module {args[1]}"
        return None
    if cmd == "scripts/kafka.sh":
        action = args[0] if args else ""
        return None if action in kafka_actions() else f"kafka.sh has no action {action!r}"
    if cmd == "docker" and args[:1] == ["compose"]:
        compose = (ROOT / "docker-compose.yml").read_text()
        profiles = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--profile"]
        missing = [p for p in profiles if not re.search(rf"profiles:\s*\[[^\]]*\b{p}\b", compose)]
        return f"docker-compose.yml has no profile {missing}" if missing else None
    if cmd.endswith("bin/mkdocs"):
        return None if args[:1] in (["build"], ["serve"]) else f"mkdocs {args}"
    return None


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=ids)
def test_every_command_line_of_the_docs_is_real(block):
    """Run or not, each dpstream command parses, each bench script and flag exists, each
    kafka.sh action and compose profile exists: a renamed flag fails here, in seconds."""
    wrong = [f"{c!r}: {p}" for c in block.commands for words in segments(c) if (p := problems(words))]
    assert wrong == [], f"{block.where}: {wrong}"


def test_the_command_checker_catches_what_it_should():
    assert problems(["dpstream", "consume", "--topic", "answers", "--max-mesages", "3"])
    assert problems([".venv/bin/python", "bench/embedded.py", "--repeat", "3"])
    assert problems(["scripts/kafka.sh", "restart"])
    assert problems(["docker", "compose", "--profile", "secured", "up"])
    assert problems([".venv/bin/dpstream", "run", "--models", "m.json", "--out", "out/"]) is None
    assert segments("A=1 B=2 scripts/kafka.sh start && C=$(x y) .venv/bin/dpstream worker &") == \
        [["scripts/kafka.sh", "start"], [".venv/bin/dpstream", "worker"]]


PYTHON = [b for b in BLOCKS if b.lang == "python" and b.kind == "session"]


@pytest.mark.parametrize("block", PYTHON, ids=ids)
def test_every_python_block_runs(block, tmp_path):
    """As a user pastes it, in a fresh interpreter, with a key in the environment as the
    quick start exports it."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")},
           "DPSTREAM_SECRET_KEY": KEY}
    done = subprocess.run([sys.executable, "-c", block.text], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{block.where}:\n{done.stderr[-3000:]}"


def test_a_page_reads_its_markers_and_sessions(tmp_path):
    """The collector on a page of its own: markers before blocks (blank lines between),
    continuations joined, comments and heredoc bodies left out, sessions in order."""
    from .blocks import blocks, session
    page = tmp_path / "page.md"
    page.write_text("# T\n\n## A\n\n```bash\necho one \\\n  two   # a comment\ncat > f <<EOF\n"
                    "{\"x\": 1}\nEOF\n```\n\n<!-- ci: not run: needs a Docker engine here -->\n\n"
                    "```bash\ndocker compose up -d\n```\n\n```python\nprint(1)\n```\n\n```bash\necho three\n```\n")
    found = blocks(page)
    assert [(b.lang, b.heading, b.kind) for b in found] == [
        ("bash", "A", "session"), ("bash", "A", "not run"), ("python", "A", "session"), ("bash", "A", "session")]
    assert found[0].commands == ["echo one two", "cat > f <<EOF"]
    assert session(page) == found[0].text + found[3].text
    assert Path(page).exists()
