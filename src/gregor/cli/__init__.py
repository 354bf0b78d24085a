"""The ``gregor`` command line."""
