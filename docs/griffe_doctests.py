"""A griffe extension for the API reference (mkdocs.yml): the docstrings' doctest examples
(``>>>`` lines and the output after them, River's convention, run by
tests/test_doctests.py) become fenced ``pycon`` blocks, so that Markdown shows them as
code instead of reading ``[x][-1, 1]`` as a link."""
import re

import griffe

EXAMPLE = re.compile(r"(?m)^([ \t]*)>>> .*(?:\n\1(?:>>> |\.\.\. |\.\.\.$|(?!>>>)\S).*)*")


class DoctestBlocks(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None and ">>> " in obj.docstring.value:
            obj.docstring.value = EXAMPLE.sub(_fence, obj.docstring.value)


def _fence(match: re.Match) -> str:
    indent = match.group(1)
    return f"{indent}```pycon\n{match.group(0)}\n{indent}```"
