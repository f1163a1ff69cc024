"""The Kafka worker: consume events, learn, checkpoint offset-stamped state in Redis.

``run_worker(settings)`` (``service.worker.loop``) is the composition root;
``onlinepredict worker`` runs it with SIGTERM/SIGINT handling (``service.worker.main``).
"""
