"""The operator's commands: a small synchronous client of the operations API (Unix socket
or HTTP(S) with mTLS) behind ``tay status|jobs|job|retry|cancel|queues|pause|resume|purge|
compact`` (docs/admin.md, docs/operations.md), and the offline ``tay storage ...`` tools
that work on a store directly (``storage_cli``, ``storage_tools``; docs/operations.md)."""
