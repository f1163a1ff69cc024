"""Forecast a series whose relation to its inputs drifts, with the discounted-VAW ensemble.

The stream is the discounted-VAW paper's ``jumps`` scenario: ``y_t = <x_t, u_t> + noise``
where the comparator ``u_t`` jumps to a new direction every 2000 rounds. A fixed-memory
learner must pick how fast to forget; the ensemble learns the discount factor online.
Part of the stream goes through the predict -> delayed label path, the rest as events.

Run against a running stack (``make up`` or ``onlinepredict up``)::

    .venv/bin/python examples/forecast_drift_dvaw.py --limit 6000
"""

from __future__ import annotations

import json

from _common import ensure_model, learn, start

from clients.datasets import load_dataset
from clients.figures import ensemble_weights

args, model, api = start(__doc__, "drift-dvaw", 6000)

# %% 1. The ensemble over discount factors (defaults: self-confident hints, base 2).
stream = load_dataset("synth-drift-jumps")
ensure_model(api, model, "dvaw-ensemble", stream.dim)

# %% 2. Most rounds go in as labelled events over HTTP, in batches.
rounds = list(stream.stream(limit=args.limit))
learned = learn(api, model, rounds[:-20])

# %% 3. The last 20 rounds: predict first, label later (the label joins the prediction).
for x, y in rounds[-20:]:
    guess = api.predict(model, x)
    api.label(model, guess.prediction_id, y)
api.wait_processed(model, learned + 20)

# %% 4. Loss, regret against the best fixed linear predictor, and where the weight sits.
figures = api.model_metrics(model)
weights = ensemble_weights(api.model_snapshot(model))
print(f"RMSE {figures['rmse']:.3f}, cumulative regret {figures['cumulative_regret']:.1f}")
if weights:
    top = sorted(weights.items(), key=lambda kv: -kv[1])[:3]
    print("heaviest discount experts:", ", ".join(f"{k}: {v:.2f}" for k, v in top))
print(json.dumps({"model": model, **figures, "experts": len(weights)}))
