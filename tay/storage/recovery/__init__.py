"""Recovery (storage.md §7): validate, lock, preflight, replay, revalidate and activate a
store, plus the offline readers built on it (``inspect``, ``verify-file``).
"""
