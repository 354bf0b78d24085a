"""On-disk commit log: segments, sparse indexes, producer state, retention, compaction.

No IO loop here: everything is plain file IO, driven by the broker.
"""
