"""asv benchmarks of tay's native hot paths (same calls as benchmarks/micro)."""
