"""gregor against Tansu, Redis Streams and NATS JetStream, and against the machine's limits.

Run it with ``scripts/bench.sh`` (or ``python -m bench``); it writes
``docs/benchmarks.md`` and its plots. Every figure is taken from the first send
to the last acknowledgement, and every record produced is consumed back and
checked (count and checksum), so a system that loses or mangles data fails the
run instead of looking fast.
"""
