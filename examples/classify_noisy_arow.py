"""Classify a stream with noisy labels using AROW.

The stream is AROW's synthetic study: points in R^20 where only two coordinates matter,
with 10% of the training labels flipped. AROW's confidence-weighted update is built to
shrug off such noise. We train on the noisy stream, then score clean test points with
batch predictions.

Run against a running stack (``make up`` or ``onlinepredict up``)::

    .venv/bin/python examples/classify_noisy_arow.py --limit 3000
"""

from __future__ import annotations

import json

from _common import ensure_model, learn, start

from clients.datasets import load_dataset

args, model, api = start(__doc__, "noisy-arow", 3000)

# %% 1. An AROW classifier (labels -1/+1).
data = load_dataset("synth-noisy-labels")
ensure_model(api, model, "arow", data.dim)

# %% 2. The noisy training stream, sent as events over HTTP.
train = list(data.stream(limit=args.limit, noise=0.1, seed=0))
learn(api, model, train)

# %% 3. Accuracy on 1000 clean test points (another seed, no label noise).
test = list(data.stream(limit=1000, noise=0.0, seed=1))
predicted = api.predict_batch(model, [x for x, _ in test]).values
accuracy = sum(int(p) == y for p, (_, y) in zip(predicted, test, strict=True)) / len(test)

figures = api.model_metrics(model)
print(f"online mistakes {figures['mistakes']} of {figures['events']} (10% labels flipped)")
print(f"clean test accuracy {accuracy:.3f}")
print(json.dumps({"model": model, **figures, "test_accuracy": accuracy}))
