"""gregor against Tansu, Redis Streams and NATS JetStream, and against the machine's limits.

Run it with ``scripts/bench.sh`` (or ``python -m bench``); it writes
``docs/benchmarks.md`` and its plots. Every figure is taken from the first send
to the last acknowledgement, and every record produced is consumed back and
checked (each record exactly once, in order within its partition, unaltered), so
a system that loses, duplicates, reorders or mangles data fails the run instead
of looking fast.
"""
