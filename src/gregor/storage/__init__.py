"""On-disk commit log: segments, sparse indexes, producer state, retention, compaction. No IO loop."""
