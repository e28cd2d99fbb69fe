"""The worker: the faust app that runs the agents over Kafka, and the Kafka plumbing every
client shares (connection settings, topic names, the one seam to faust, mode and aiokafka
internals). Imports nothing from ``dpstream.streams.tools`` or ``dpstream.streams.cli``."""
