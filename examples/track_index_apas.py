"""Track the S&P 500 with 20 of its stocks, online, with APAS.

Each day the tracker sees the 20 stocks' returns ``x_t`` and the index return ``y_t``; it
predicts the index return with its current portfolio ``w_t`` (``x_t . w_t``), is scored,
and updates ``w_t`` on the simplex (long-only, fully invested). Events go through Kafka.

Run against a running stack (``make up`` or ``onlinepredict up``)::

    .venv/bin/python examples/track_index_apas.py --limit 2000
"""

from __future__ import annotations

import asyncio
import json

from _common import ensure_model, start

from clients import EventProducer
from clients.datasets import load_dataset

args, model, api = start(__doc__, "sp500-apas", 2000)

# %% 1. An APAS tracker over the 20 stocks, its features named by ticker.
panel = load_dataset("sp500")  # skfolio's panel: daily returns, index return as the label
features = list(panel.feature_names)
ensure_model(api, model, "apas", panel.dim, {"lam": 0.01}, features=features)

# %% 2. Stream the first N trading days through Kafka (key = model id, one id per event).
days = list(panel.stream(limit=args.limit))
before = api.processed(model)


async def produce() -> None:
    async with EventProducer() as producer:  # ONLINEPREDICT_KAFKA_BOOTSTRAP
        await producer.send_many(model, [x for x, _ in days], [y for _, y in days])


asyncio.run(produce())

# %% 3. Wait until the workers have learned every day, then read the figures.
api.wait_processed(model, before + len(days))
figures = api.model_metrics(model)
portfolio = api.portfolio(model)
print(f"tracking error {figures['tracking_error']:.2e}, RMSE {figures['rmse']:.2e}")
print(f"excess cumulative return {figures.get('excess_cumulative_return', float('nan')):+.4f}")
print("top holdings:", ", ".join(f"{a} {w:.1%}" for a, w in portfolio.top(5)))

# %% 4. Tomorrow's index return if every stock rose 1%: the portfolio's return, 1%. The
# model's features are the tickers, so x may name them (a ticker left out would be 0).
tomorrow = api.predict(model, dict.fromkeys(features, 0.01))
print(f"predicted index return {tomorrow.value:.4f} (model version {tomorrow.model_version})")

print(json.dumps({"model": model, **figures, "weights_sum": sum(portfolio.weights.values())}))
