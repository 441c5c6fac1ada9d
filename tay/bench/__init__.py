"""``tay bench``: the finite reference workload against a real ``tay serve``.

Modules: ``profile`` (TOML workload profiles), ``harness`` (one measured run: server,
worker and producer processes, cold restart), ``clients`` (the producer and worker process
bodies), ``server`` (the server process and its resource readings), ``journal_facts``
(offline event counts and timestamps), ``metrics`` (percentiles), ``report`` (JSON,
Markdown, PNG) and ``cli`` (the command group).
"""
