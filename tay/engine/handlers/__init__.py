"""The engine's command handlers, by who sends the command: producers (enqueue,
status, result, cancel: ``producer``), executors (hello, registrations, reports:
``workers``) and operators (the operations API: ``admin``). Each is a layer of the
``Engine`` class (``tay.engine.core``) over ``EngineState``."""
