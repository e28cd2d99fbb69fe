"""What users and operators run beside the worker, or instead of it: the embedded runtime
over files, replay and the audit report, reading topics, user files and the data owner's
report, output directories, the ACL plan. Builds on ``dpstream.streams.worker``; imports
nothing from ``dpstream.streams.cli``."""
