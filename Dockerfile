# syntax=docker/dockerfile:1.7
# One image for api, worker and replayer: `onlinepredict api|worker|replay ...`.
# Base images pinned by exact version (tests/deploy); add an @sha256 digest where your
# registry policy asks for one (`docker buildx imagetools inspect <image>` prints it).

# The browser assets (uPlot for /dashboard, Swagger UI and ReDoc for /docs and /redoc),
# from npm at the locked versions, as `make setup` installs them.
FROM node:20.18.0-bookworm-slim AS assets
WORKDIR /assets
COPY service/dashboard/package.json service/dashboard/package-lock.json ./dashboard/
COPY service/docs_ui/package.json service/docs_ui/package-lock.json service/docs_ui/.npmrc ./docs_ui/
RUN (cd dashboard && npm ci --no-audit --no-fund) \
 && (cd docs_ui && npm ci --no-audit --no-fund)

FROM python:3.11.10-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY learners ./learners
COPY service ./service
COPY clients ./clients
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --upgrade pip \
 && /opt/venv/bin/pip install '.[data,fast]' \
 && cd / && NUMBA_CACHE_DIR=/opt/numba-cache /opt/venv/bin/python -c \
    "from learners._accel import warm; warm(); from service.store import seen; seen.warm()"

FROM python:3.11.10-slim-bookworm AS runtime
# (warm() runs from / so that it compiles the installed package, not /src's copy: numba's
# cache is keyed by the source file's path and modification time.)
# NUMBA_CACHE_DIR: the learners' compiled kernels and the ids' BLAKE2b, compiled at build
# time (learners/_accel.py warm(), service/store/seen.py warm()), so a worker loads them
# (~0.5 s) instead of compiling (~4 s). The cache is for the build machine's CPU: on
# another CPU the first step compiles and writes it there (app's).
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    OPENBLAS_NUM_THREADS=1 NUMBA_CACHE_DIR=/opt/numba-cache
RUN groupadd --system app && useradd --system --gid app --home /app --shell /usr/sbin/nologin app
COPY --from=build /opt/venv /opt/venv
COPY --from=build --chown=app:app /opt/numba-cache /opt/numba-cache
# Where service/dashboard/router.py and service/docs_ui/router.py look for them (the
# installed package's node_modules); only the files they serve.
ARG SITE=/opt/venv/lib/python3.11/site-packages
COPY --from=assets /assets/dashboard/node_modules/uplot/dist ${SITE}/service/dashboard/node_modules/uplot/dist
COPY --from=assets /assets/docs_ui/node_modules/swagger-ui-dist ${SITE}/service/docs_ui/node_modules/swagger-ui-dist
COPY --from=assets /assets/docs_ui/node_modules/redoc/bundles ${SITE}/service/docs_ui/node_modules/redoc/bundles
WORKDIR /app
USER app
EXPOSE 8000 9100 9101
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=5 \
  CMD ["python", "-c", "import os,sys,urllib.request; port=os.environ.get('ONLINEPREDICT_HEALTH_PORT', os.environ.get('ONLINEPREDICT_API_PORT','8000')); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["onlinepredict"]
CMD ["api"]
