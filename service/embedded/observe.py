"""`onlinepredict up --observe`: a local Prometheus scraping the API and every worker, and
Grafana with the provisioned dashboards where a ``grafana-server`` binary exists.

Both are optional system binaries (Debian's ``prometheus``; Grafana from its own packages):
where one is missing, ``up`` says so and carries on.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

from service.embedded.stack import EmbeddedError, EmbeddedProcess, _spawn, _wait, free_port

logger = logging.getLogger(__name__)
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SCRAPE_INTERVAL_S = 1  # local runs: figures show up within a second or two


def prometheus_config(api: str, workers: list[str], interval_s: float = SCRAPE_INTERVAL_S) -> str:
    """prometheus.yml for the embedded stack (same job names as deploy/prometheus)."""
    cfg = {
        "global": {"scrape_interval": f"{interval_s}s", "evaluation_interval": f"{interval_s}s"},
        "scrape_configs": [
            {"job_name": "onlinepredict-api", "static_configs": [{"targets": [api]}]},
            {"job_name": "onlinepredict-worker", "static_configs": [{"targets": workers}]},
        ],
    }
    return json.dumps(cfg, indent=2)  # JSON is valid YAML


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:  # noqa: S310 - local URL
            return bool(resp.status == 200)
    except OSError:
        return False


def start_prometheus(
    api: str,
    workers: list[str],
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    timeout: float = 30.0,
    log_path: str | None = None,
) -> EmbeddedProcess:
    """Start ``prometheus`` scraping ``api`` and ``workers`` (``host:port`` strings)."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise EmbeddedError("no `prometheus` binary on PATH (Debian: apt-get install prometheus)")
    port = port or free_port(host)
    workdir = tempfile.mkdtemp(prefix="onlinepredict-prometheus-")
    config = Path(workdir) / "prometheus.yml"
    config.write_text(prometheus_config(api, workers))
    cmd = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir}/data",
        f"--web.listen-address={host}:{port}",
    ]
    proc = _spawn(cmd, log_path)
    url = f"http://{host}:{port}"
    _wait(proc, lambda: _http_ok(url + "/-/ready"), f"prometheus on {host}:{port}", timeout)
    logger.info("started prometheus pid %d on %s", proc.pid, url)
    return EmbeddedProcess("prometheus", host, port, proc, url, workdir, [workdir])


def start_grafana(
    prometheus_url: str, *, host: str = "127.0.0.1", port: int = 3000, timeout: float = 60.0
) -> EmbeddedProcess | None:
    """Start ``grafana-server`` with our provisioning, or return None if it is not installed."""
    binary = shutil.which("grafana-server") or shutil.which("grafana")
    if binary is None:
        return None
    workdir = tempfile.mkdtemp(prefix="onlinepredict-grafana-")
    prov = Path(workdir) / "provisioning"
    shutil.copytree(DEPLOY / "grafana" / "provisioning", prov)
    ds = prov / "datasources" / "prometheus.yml"
    ds.write_text(ds.read_text().replace("http://prometheus:9090", prometheus_url))
    dash = prov / "dashboards" / "onlinepredict.yml"
    dash.write_text(
        dash.read_text().replace("/var/lib/grafana/dashboards", str(DEPLOY / "grafana/dashboards"))
    )
    env = {
        **os.environ,
        "GF_PATHS_PROVISIONING": str(prov),
        "GF_PATHS_DATA": str(Path(workdir) / "data"),
        "GF_SERVER_HTTP_ADDR": host,
        "GF_SERVER_HTTP_PORT": str(port),
        "GF_AUTH_ANONYMOUS_ENABLED": "true",
        "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
    }
    args = [binary] if binary.endswith("grafana-server") else [binary, "server"]
    home = next((p for p in ("/usr/share/grafana",) if Path(p).exists()), None)
    if home:
        args.append(f"--homepath={home}")
    proc = _spawn(args, env=env)
    url = f"http://{host}:{port}"
    _wait(proc, lambda: _http_ok(url + "/api/health"), f"grafana on {host}:{port}", timeout)
    return EmbeddedProcess("grafana", host, port, proc, url, workdir, [workdir])
