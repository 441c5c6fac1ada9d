"""How the engine holds its retained jobs: one job's entry (``jobs``), finished jobs
packed into tuples (``packed``) or held in their base's columns (``finished``), the admin
listing's indexes (``job_index``), the fused commits' event payloads (``payloads``), and
the args JSON kept for a job's first execute frame (``execute_args``)."""
