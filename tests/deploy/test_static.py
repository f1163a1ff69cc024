"""Static validation of the deployment files (no Docker engine runs here)."""

from __future__ import annotations

import importlib
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
        if name not in ("kafka-init", "redis-cluster-init", "replayer"):  # one-shot jobs
            assert "test" in svc.get("healthcheck", {}), f"{name} has no healthcheck"
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert cond["condition"] in ("service_healthy", "service_completed_successfully")


def test_compose_has_no_inline_secrets() -> None:
    """A secret is interpolated from .env, required where it is used (``:?``), or emptied
    (``""``) where .env would hand it to a process that must not hold it."""
    for name in ("docker-compose.yml", "docker-compose.secure.yml"):
        text = (ROOT / name).read_text()
        for var in (
            "ONLINEPREDICT_API_KEY",
            "GRAFANA_ADMIN_PASSWORD",
            "GF_SECURITY_ADMIN_PASSWORD",
            "_PASSWORD",
        ):
            for line in text.splitlines():
                m = re.match(r"\s*(\w*" + var + r"\w*): (.*)$", line)
                if m:
                    value = m.group(2)
                    assert value == '""' or re.fullmatch(r"\$\{\w+:[?-][^}]*\}", value), line


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
    assert services["api"]["ports"] == [f"127.0.0.1:${{STACK_API_PORT:-{api_port}}}:{api_port}"]
    metrics_port = services["api"]["environment"]["ONLINEPREDICT_METRICS_PORT"]
    worker_port = services["worker-1"]["environment"]["ONLINEPREDICT_WORKER_METRICS_PORT"]
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = {
        t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    assert f"api:{metrics_port}" in targets and f"api:{api_port}" not in targets
    assert {f"worker-1:{worker_port}", f"worker-2:{worker_port}"} <= targets


def test_dockerfile_runs_as_non_root_with_real_commands() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER\s+(?!root)\w+", text, re.M)
    assert "HEALTHCHECK" in text
    assert 'ENTRYPOINT ["onlinepredict"]' in text
    commands = {"api", "worker"} | {
        svc["command"][0]
        for svc in _compose()["services"].values()
        if svc.get("image", "").startswith("onlinepredict:") and svc.get("command")
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
    assert {"Deployment", "Service", "ConfigMap", "ServiceMonitor", "ScaledObject"} <= set(kinds)


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


# ---- the image ---------------------------------------------------------------------------
def _dockerfile_stages() -> list[tuple[str, str, list[str]]]:
    """(stage name, base image, instruction lines) per FROM, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stages: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            stages.append((m.group(2) or str(len(stages)), m.group(1), []))
        else:
            stages[-1][2].append(line)
    return stages


def _copies() -> list[tuple[str, str | None, list[str], str]]:
    """(stage, --from stage or None, sources, destination) of every COPY, ARGs expanded."""
    out = []
    for name, _, lines in _dockerfile_stages():
        args: dict[str, str] = {}
        for line in lines:
            if m := re.match(r"ARG\s+(\w+)=(\S+)", line):
                args[m.group(1)] = m.group(2)
            if not line.startswith("COPY "):
                continue
            for key, value in args.items():
                line = line.replace("${" + key + "}", value)
            words = line.split()[1:]
            src_stage = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")), None)
            paths = [w for w in words if not w.startswith("--")]
            out.append((name, src_stage, paths[:-1], paths[-1]))
    return out


def test_dockerfile_copies_only_what_exists_or_an_earlier_stage_made() -> None:
    stages = _dockerfile_stages()
    names = [name for name, _, _ in stages]
    for stage, src_stage, sources, _ in _copies():
        if src_stage is None:
            for src in sources:
                assert (ROOT / src).exists(), f"{stage}: COPY {src}: not in the repository"
            continue
        assert src_stage in names[: names.index(stage)], f"{stage}: no earlier stage {src_stage}"
        # what the earlier stage made: under its WORKDIR, or a path its RUNs name
        lines = stages[names.index(src_stage)][2]
        workdirs = [line.split()[1] for line in lines if line.startswith("WORKDIR ")]
        runs = " ".join(line for line in lines if line.startswith("RUN "))
        for src in sources:
            made = any(src.startswith(w.rstrip("/") + "/") for w in workdirs) or src in runs
            assert made, f"{stage}: COPY --from={src_stage} {src}: that stage makes no such path"


def test_image_has_the_browser_assets_where_the_code_looks() -> None:
    import service.api  # noqa: F401  (the routers import the app's dependencies)

    dashboard = importlib.import_module("service.dashboard.router")
    docs_ui = importlib.import_module("service.docs_ui.router")

    stages = _dockerfile_stages()
    node = next(s for s in stages if s[1].startswith("node:"))
    assert any("npm ci" in line for line in node[2]), "the node stage must run npm ci"
    runtime_python = re.match(r"python:(\d+\.\d+)", stages[-1][1])
    assert runtime_python, stages[-1][1]
    site = f"/opt/venv/lib/python{runtime_python.group(1)}/site-packages/"
    copied = {dest for stage, frm, _, dest in _copies() if frm == node[0]}
    # each copied node_modules path: a locked dependency, present where `make setup` installs
    workdir = next(line.split()[1] for line in node[2] if line.startswith("WORKDIR "))
    dirs = {  # ./dashboard/ in the node stage <- service/dashboard/package.json
        dest.strip("./").rstrip("/"): pathlib.Path(srcs[0]).parent
        for stage, frm, srcs, dest in _copies()
        if stage == node[0] and frm is None
    }
    for _, frm, srcs, _ in _copies():
        for src in srcs if frm == node[0] else []:
            local, _, rest = src.removeprefix(workdir.rstrip("/") + "/").partition("/")
            pkg_dir = ROOT / dirs[local]
            package = rest.removeprefix("node_modules/").split("/")[0]
            deps = json.loads((pkg_dir / "package.json").read_text())["dependencies"]
            assert package in deps, f"COPY {src}: {package} not in {pkg_dir}/package.json"
            assert package in (pkg_dir / "package-lock.json").read_text(), src
            if (pkg_dir / "node_modules").exists():
                assert (pkg_dir / rest).exists(), f"COPY {src}: npm installs no {rest}"
    needed = {dashboard.VENDOR} | {p.parent for p in docs_ui.ASSETS.values()}
    for path in needed:
        rel = path.relative_to(ROOT).as_posix()
        assert any(site + rel == d or (site + rel).startswith(d + "/") for d in copied), rel


def test_dockerignore_keeps_the_context_small_and_the_sources_in() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for must in (".git", ".venv", "**/node_modules", "**/__pycache__", ".mypy_cache"):
        assert must in ignored, f".dockerignore lacks {must}"
    for _, frm, sources, _ in _copies():
        for src in sources if frm is None else []:
            top = src.split("/")[0]
            assert top not in ignored and src not in ignored, f"COPY {src} is ignored"


# ---- compose -----------------------------------------------------------------------------
def _env_example() -> set[str]:
    lines = (ROOT / "deploy/.env.example").read_text().splitlines()
    return {ln.split("=", 1)[0] for ln in lines if "=" in ln and not ln.startswith("#")}


def test_every_variable_compose_interpolates_is_in_env_example() -> None:
    text = (ROOT / "docker-compose.yml").read_text() + (
        ROOT / "docker-compose.secure.yml"
    ).read_text()
    text = text.replace("$$", "")  # compose's escape of a literal $ (shell in a command)
    interpolated = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text))
    interpolated |= set(re.findall(r"\$([A-Za-z_][A-Za-z0-9_]*)", text))
    assert {"ONLINEPREDICT_API_KEY", "GRAFANA_ADMIN_PASSWORD"} <= interpolated
    missing = interpolated - _env_example()
    assert not missing, f"compose reads {sorted(missing)}; add them to deploy/.env.example"


def test_env_file_reaches_every_app_service() -> None:
    apps = 0
    for name, svc in _compose()["services"].items():
        if svc.get("image", "").startswith("onlinepredict:"):
            assert {"path": ".env", "required": False} in svc.get("env_file", []), name
            apps += 1
    assert apps >= 4


def test_kafka_log_is_on_the_volume() -> None:
    kafka = _compose()["services"]["kafka"]
    log_dirs = kafka["environment"]["KAFKA_LOG_DIRS"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in kafka["volumes"]}
    assert mounts.get(log_dirs) in _compose()["volumes"], (log_dirs, mounts)


def test_prometheus_scrapes_every_worker_of_compose() -> None:
    services = _compose()["services"]
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "onlinepredict-worker")
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    workers = {n: s for n, s in services.items() if s.get("command") == ["worker"]}
    assert len(workers) >= 2
    for name, svc in workers.items():
        port = svc["environment"]["ONLINEPREDICT_WORKER_METRICS_PORT"]
        assert int(port) > 0 and f"{name}:{port}" in targets, name
