# One image for api, worker and replayer: `onlinepredict api|worker|replay ...`.
# syntax=docker/dockerfile:1.7
FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY learners ./learners
COPY service ./service
COPY clients ./clients
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --upgrade pip \
 && /opt/venv/bin/pip install '.[data]'

FROM python:3.11-slim AS runtime
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    OPENBLAS_NUM_THREADS=1
RUN groupadd --system app && useradd --system --gid app --home /app --shell /usr/sbin/nologin app
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
USER app
EXPOSE 8000 9100
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=5 \
  CMD ["python", "-c", "import os,sys,urllib.request; port=os.environ.get('ONLINEPREDICT_HEALTH_PORT', os.environ.get('ONLINEPREDICT_API_PORT','8000')); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["onlinepredict"]
CMD ["api"]
