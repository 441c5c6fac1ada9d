"""Schedules in the engine: the cron grammar (``cron``), a ``schedule`` request validated
into a durable definition (``declaration``), when occurrences fall due (``timing``), the
durable schedule table with its one ``apply`` (``table``), and the schedule requests and
occurrence delivery (``commands``). docs/schedules.md."""
