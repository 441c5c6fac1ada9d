"""The operator side of the operations API: a small synchronous client (Unix socket or
HTTP(S) with mTLS) and the ``tay status|jobs|job|retry|cancel|queues|pause|resume|purge|
compact`` commands (docs/admin.md, docs/operations.md)."""
