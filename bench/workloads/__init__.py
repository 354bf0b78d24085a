"""The workloads of the issue, each runnable against any peer's client."""
