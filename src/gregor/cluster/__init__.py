"""Who leads what: the metadata image, partitions as replicas, the replica manager."""
