"""Implementations of the worker's ports (``service.worker.ports``): aiokafka and Redis for
the service, in-memory ones for deterministic tests and simulations."""
