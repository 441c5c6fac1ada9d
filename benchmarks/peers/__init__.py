"""Peer job queues run with the tay reference workload shape (see docs/benchmarks.md)."""
