"""The bare FastAPI endpoints ``benchmarks/predict.py`` compares the predict route with, both
without dependencies:

* ``POST /v1/models/{id}/predict``: the same path and method, no body parsing, a constant
  answer (the floor of any FastAPI route);
* ``POST /minimal/v1/models/{id}/predict``: the minimal equivalent of a prediction (issue 18):
  parse the JSON body (or, for a binary batch body, docs/events.md §7, take its float64
  block as one numpy view, unchecked), one numpy matrix-vector product over ``x`` or
  ``instances``, answer values and prediction ids with orjson (or, when the request asks
  for it, the compact answer: header and values block). No spec check, no storage
  of the rows for their labels, no checkpoint version read: what the predict route does
  beyond it is the cost of the service.

    uvicorn benchmarks._bench_bare:app   (run from the repository root)
"""

from __future__ import annotations

import os

import numpy as np
import orjson
from fastapi import FastAPI, Request, Response

from clients.batch_answer import ANSWER_CONTENT_TYPE, ANSWER_HEADER, ANSWER_MAGIC, ANSWER_VERSION
from clients.wire import PREDICT_CONTENT_TYPE, PREDICT_HEADER

app = FastAPI()

CONSTANT = {"predictions": [{"value": 0.0, "prediction_id": "0" * 32}], "model_version": 0}
W = np.random.default_rng(0).normal(size=int(os.environ.get("BENCH_BARE_DIM", "20")))


@app.post("/v1/models/{model_id}/predict")
async def predict(model_id: str) -> dict[str, object]:
    return CONSTANT


@app.post("/minimal/v1/models/{model_id}/predict")
async def predict_minimal(model_id: str, request: Request) -> Response:
    raw = await request.body()
    if request.headers.get("content-type") == PREDICT_CONTENT_TYPE:
        n, d = PREDICT_HEADER.unpack_from(raw)[4:]
        X = np.frombuffer(raw, "<f8", n * d, PREDICT_HEADER.size).reshape(n, d)
    else:
        body = orjson.loads(raw)
        X = np.array(body["instances"] if "instances" in body else [body["x"]], dtype=np.float64)
    if ANSWER_CONTENT_TYPE in request.headers.get("accept", ""):
        # the compact answer (docs/events.md §8): header, batch id, the values block
        values_block = np.ascontiguousarray(X @ W, dtype="<f8")
        head = ANSWER_HEADER.pack(
            ANSWER_MAGIC, ANSWER_VERSION, 0, 0, len(values_block), 0, 0, 0, 1, os.urandom(16)
        )
        return Response(head + values_block.tobytes(), media_type=ANSWER_CONTENT_TYPE)
    values = (X @ W).tolist()
    ids = os.urandom(16 * len(values)).hex()
    out = [{"value": v, "prediction_id": ids[32 * i : 32 * (i + 1)]} for i, v in enumerate(values)]
    return Response(
        orjson.dumps({"predictions": out, "model_version": 1}), media_type="application/json"
    )
