"""Metrics: running learning statistics (checkpointed with the learner) and their exposition."""
