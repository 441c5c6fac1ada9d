"""Store-v2 compaction (storage.md §3.8): plan, candidate, verification, publication,
adoption and reclaim, offline (``offline``) and online (``online``)."""
