"""MkDocs hook: the API reference's source tree.

The repository keeps one folder per layer (mechanisms/, learners/, ...) that installs as
``dpstream.<layer>`` (pyproject's package-dir). mkdocstrings reads the source statically
(griffe), which looks for a ``dpstream/`` folder: none exists in the repository, and
griffe does not follow setuptools' editable-install mapping when the package names
differ from the folders. So before the build this hook makes ``build/docs-api/dpstream/``
with one symbolic link per layer folder (``build/`` is ignored by git); mkdocs.yml points
the python handler's ``paths`` there."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("mechanisms", "learners", "agents", "streams", "schemas")


def on_startup(command, dirty) -> None:
    tree = ROOT / "build" / "docs-api" / "dpstream"
    tree.mkdir(parents=True, exist_ok=True)
    for layer in LAYERS:
        link = tree / layer
        if not link.is_symlink():
            link.symlink_to(Path("..", "..", "..", layer))
