"""Static validation of the deployment files (no Docker engine runs here)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re

import yaml

from service.config import Settings

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_mounts_only_existing_files() -> None:
    for name, svc in _compose()["services"].items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("./"):
                assert (ROOT / src).exists(), f"{name} mounts missing {src}"


def test_compose_healthchecks_and_dependencies() -> None:
    services = _compose()["services"]
    for name, svc in services.items():
        if name not in ("kafka-init", "replayer"):
            assert "test" in svc.get("healthcheck", {}), f"{name} has no healthcheck"
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert cond["condition"] in ("service_healthy", "service_completed_successfully")


def test_compose_has_no_inline_secrets() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    for var in ("ONLINEPREDICT_API_KEY", "GRAFANA_ADMIN_PASSWORD", "GF_SECURITY_ADMIN_PASSWORD"):
        for line in text.splitlines():
            if var + ":" in line:
                assert "${" in line and ":?" in line, line


def test_compose_environment_matches_settings() -> None:
    fields = set(Settings.model_fields)
    services = _compose()["services"]
    for name in ("api", "worker-1", "worker-2", "replayer"):
        env = services[name]["environment"]
        for var in env:
            if var.startswith("ONLINEPREDICT_") and var not in (
                "ONLINEPREDICT_API_URL",  # the client's variable
                "ONLINEPREDICT_HEALTH_PORT",  # read by the image's HEALTHCHECK only
            ):
                assert var.removeprefix("ONLINEPREDICT_").lower() in fields, f"{name}: {var}"
    api_port = services["api"]["environment"]["ONLINEPREDICT_API_PORT"]
    assert services["api"]["ports"] == [f"{api_port}:{api_port}"]
    worker_port = services["worker-1"]["environment"]["ONLINEPREDICT_WORKER_METRICS_PORT"]
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = {
        t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    assert f"api:{api_port}" in targets
    assert {f"worker-1:{worker_port}", f"worker-2:{worker_port}"} <= targets


def test_dockerfile_runs_as_non_root_with_real_commands() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER\s+(?!root)\w+", text, re.M)
    assert "HEALTHCHECK" in text
    assert 'ENTRYPOINT ["onlinepredict"]' in text
    commands = {"api", "worker"} | {
        svc["command"][0]
        for svc in _compose()["services"].values()
        if svc.get("image") == "onlinepredict:latest" and svc.get("command")
    }
    if importlib.util.find_spec("service.cli") is None:
        raise AssertionError("service/cli.py is missing")
    from typer.main import get_command

    from service.cli import app

    cli = get_command(app)
    known = set(cli.commands)  # type: ignore[attr-defined]
    assert commands <= known, f"unknown CLI commands {commands - known}"


def test_grafana_dashboards_are_generated_and_valid() -> None:
    spec = importlib.util.spec_from_file_location(
        "dashboards", ROOT / "deploy/grafana/dashboards.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, board in mod.DASHBOARDS.items():
        path = ROOT / "deploy/grafana/dashboards" / name
        assert path.read_text() == mod.render(board), f"{name} is stale: rerun dashboards.py"
        loaded = json.loads(path.read_text())
        assert loaded["panels"] and all(p["targets"][0]["expr"] for p in loaded["panels"])


def test_k8s_manifests_parse() -> None:
    kinds = []
    for path in (ROOT / "deploy/k8s").glob("*.yaml"):
        kinds += [doc["kind"] for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert {"Deployment", "Service", "ConfigMap", "ServiceMonitor"} <= set(kinds)


def test_worker_stop_bound_fits_every_grace_period() -> None:
    """The worker's stop bound ends it before any orchestrator's SIGKILL: the default,
    the k8s manifest's value and its grace period, compose's stop_grace_period, and the
    test harness (tests/service/conftest.py WorkerProcess.stop) agree."""
    from tests.service.conftest import STOP_SLACK_S

    default = Settings.model_fields["worker_stop_timeout_s"].default
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy/k8s/worker.yaml").read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0].get("env", [])}
    k8s_bound = float(env["ONLINEPREDICT_WORKER_STOP_TIMEOUT_S"])
    assert k8s_bound == default
    assert k8s_bound + STOP_SLACK_S <= pod["terminationGracePeriodSeconds"]
    grace = _compose()["services"]["worker-1"]["stop_grace_period"]
    assert default + STOP_SLACK_S <= float(grace.removesuffix("s"))
    assert default <= 30 - STOP_SLACK_S  # Kubernetes' default grace


def test_every_dashboard_metric_is_emitted_by_the_code() -> None:
    """The names the panels query exist in the code (the e2e test also asks Prometheus)."""
    from service.metrics.exposition import _GAUGES, PREFIX

    source = "\n".join(p.read_text() for p in (ROOT / "service").rglob("*.py"))
    emitted = set(re.findall(r'"(onlinepredict_[a-z_]+)"', source))
    emitted |= {PREFIX + s for s in re.findall(r'PREFIX \+ "([a-z_]+)"', source)}
    emitted |= {PREFIX + suffix for suffix, _, _ in _GAUGES.values()}
    names: set[str] = set()
    for path in (ROOT / "deploy/grafana/dashboards").glob("*.json"):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel["targets"]:
                names |= set(re.findall(r"onlinepredict_[a-z_]+", target["expr"]))
    assert names
    for name in sorted(names):
        base = re.sub(r"_(bucket|count|sum|total|info)$", "", name)
        assert name in emitted or base in emitted, f"dashboards query {name}; no code emits it"
