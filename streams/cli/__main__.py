"""``python -m dpstream.streams.cli ARGS``: the ``dpstream`` command."""
import sys

from .commands import main

if __name__ == "__main__":          # importing this module (doctest collection) runs nothing
    sys.exit(main())
