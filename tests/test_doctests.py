"""Every docstring example in the package runs and shows what it says (River's rule:
an example in the docs is a test)."""
import doctest
import importlib
import pkgutil

import pytest

import dpstream.agents  # noqa: F401 - registers the model kinds the examples may use

PACKAGES = ("mechanisms", "learners", "agents", "schemas", "streams")


def modules_with_examples():
    for package in PACKAGES:
        pkg = importlib.import_module(f"dpstream.{package}")
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"dpstream.{package}."):
            module = importlib.import_module(info.name)
            if any(t.examples for t in doctest.DocTestFinder().find(module)):
                yield info.name


@pytest.mark.parametrize("name", sorted(modules_with_examples()))
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
