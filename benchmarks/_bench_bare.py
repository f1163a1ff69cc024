"""The bare FastAPI endpoint ``benchmarks/predict.py`` compares the predict route with: the
same path and method, no dependencies, no body parsing, a constant answer.

    uvicorn benchmarks._bench_bare:app   (run from the repository root)
"""

from __future__ import annotations

from fastapi import FastAPI

app = FastAPI()

CONSTANT = {"predictions": [{"value": 0.0, "prediction_id": "0" * 32}], "model_version": 0}


@app.post("/v1/models/{model_id}/predict")
async def predict(model_id: str) -> dict[str, object]:
    return CONSTANT
