"""Consumer groups: the group coordinator and committed offsets on ``__consumer_offsets``."""
