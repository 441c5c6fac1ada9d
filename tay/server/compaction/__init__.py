"""Online compaction while the server runs: when, the capture on the loop, the
preparation in a process of its own and the fenced switch (``compactor``), and its flags
(``config``). The storage side is ``tay.storage.compaction``; docs/compaction.md."""
