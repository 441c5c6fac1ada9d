"""The job states the operations API's bulk actions take (docs/admin.md): one spelling for
the engine, the CLI and the dashboard, in a module the CLI imports without the engine."""

RETRIABLE = ("retryable", "discarded", "cancelled", "scheduled")  # retry_jobs (scheduled: run now)
CANCELLABLE = ("scheduled", "available", "retryable", "executing")  # cancel_jobs
DELETABLE = ("completed", "discarded", "cancelled")  # delete_jobs: the finished states
