"""The ``dpstream`` command (``commands.main``) and the demo: the edge where arguments,
files and one-line failures meet the worker and the tools."""
