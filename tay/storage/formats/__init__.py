"""The byte formats of a v1 store: the canonical Value, Record v1, Segment v1 and STORE v1.

Pure codecs over bytes (the heavy lifting is in ``tay._native``); no files, no clocks.
"""
