"""The journal: store bootstrap, the batched segment writer with rotation, group commit and
the history caps. Synchronous; the committer runs the writer on a thread of its own.
"""
