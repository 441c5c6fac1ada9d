"""What the engine checks in a request before it changes anything: an enqueue's task,
args and options (``options``), an executor's reports (``completion``), values measured
against the limits (``values``), and identifiers (``ids``)."""
