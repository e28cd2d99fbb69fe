"""Layers point one way (docs/architecture.md, "Layers"): mechanisms ->
learners -> agents -> streams.worker -> streams.tools -> streams.cli, with schemas shared.
Every import of every module is read from its source (function-level imports too), so a
layer that reaches up, even lazily, fails here. Before issue 44, streams/ was one folder
in which cli and demo imported each other and the faust seam imported the ACL plan."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RANK = {"mechanisms": 0, "learners": 1, "agents": 2, "streams.worker": 3, "streams.tools": 4,
        "streams.cli": 5}
FOLDERS = {"mechanisms": "mechanisms", "learners": "learners", "agents": "agents", "schemas": "schemas",
           "streams.worker": "streams/worker", "streams.tools": "streams/tools", "streams.cli": "streams/cli"}
# Reaching up, on purpose and lazily: the model config validates a kind's params through
# the kinds' registry on first use (schemas must not import the kinds when it loads:
# tests/test_schemas_validate.py checks that at import time).
ALLOWED = {("schemas", "agents")}


def layer_of(module: str) -> str | None:
    """``dpstream.streams.tools.replay`` -> ``streams.tools``."""
    parts = module.split(".")
    if parts[:1] != ["dpstream"] or len(parts) < 2:
        return None
    if parts[1] == "streams":
        return "streams." + parts[2] if len(parts) > 2 and f"streams.{parts[2]}" in RANK else "streams"
    return parts[1]


def modules():
    for layer, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            name = ".".join(["dpstream", *layer.split("."), *rel.parts])
            yield layer, name.removesuffix(".__init__"), path


def imports(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)   # from pkg import module
    return {m for m in out if m.startswith("dpstream.")}


def test_every_layer_imports_only_from_its_left_and_schemas():
    wrong = []
    for layer, name, path in modules():
        for target in imports(name, path):
            other = layer_of(target)
            if other in (None, "schemas", layer) or (layer, other) in ALLOWED:
                continue
            if other == "streams" or layer == "schemas" or RANK[other] > RANK[layer]:
                wrong.append(f"{path.relative_to(ROOT)} ({layer}) imports {target}")
    assert wrong == []


def test_the_checker_sees_a_layer_reaching_up(tmp_path):
    """The test above would catch the old cycle: a worker module importing the tools."""
    bad = tmp_path / "seam.py"
    bad.write_text("def f():\n    from ..tools.acls import ALLOW\n")
    assert layer_of(next(iter(imports("dpstream.streams.worker.seam", bad)))) == "streams.tools"


@pytest.mark.parametrize("layer", list(FOLDERS))
def test_every_folder_is_a_package_the_install_lists(layer):
    """pyproject's explicit package list names every folder that holds modules: a
    non-editable install (the Docker image's ``pip install .``) copies only those. Before,
    agents/kinds was left out and ``dpstream schemas`` failed there."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folder = ROOT / FOLDERS[layer]
    for init in folder.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT / FOLDERS[layer].split("/")[0])
        assert ".".join(["dpstream", FOLDERS[layer].split("/")[0], *rel.parts]) in listed, init
    for path in folder.rglob("*.py"):
        assert (path.parent / "__init__.py").exists(), f"{path} is in a folder without __init__.py"


@pytest.mark.slow
def test_a_built_wheel_holds_every_module_and_the_command(tmp_path):
    """What `pip install .` installs (the Docker image does): a wheel built from a copy of
    the sources (setuptools leaves build/ behind in the tree it builds) holds every module
    of every layer and the ``dpstream`` entry point. Before, agents/kinds was missing from
    it, and ``dpstream schemas`` failed with No module named 'dpstream.agents.kinds'."""
    import shutil
    import subprocess
    import sys
    import zipfile
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    layers = {folder.split("/")[0] for folder in FOLDERS.values()}
    for layer in layers:
        shutil.copytree(ROOT / layer, src / layer, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
                           str(src)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("dpstream-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for layer in layers:
        for path in (ROOT / layer).rglob("*.py"):
            if "__pycache__" not in path.parts:
                assert f"dpstream/{path.relative_to(ROOT)}" in names, path
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "dpstream = dpstream.streams.cli.commands:main" in zipfile.ZipFile(wheel).read(entry).decode()
