"""Redis persistence: model specs, offset-stamped learner state, prediction joins."""
