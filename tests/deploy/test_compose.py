"""Compose for the host, statically (no Docker engine runs here): pinned images built once,
loopback-only ports, Kafka's host listener, secrets that reach only their process, the
`secure` override, Prometheus/Alertmanager wiring, and the README's compose block run
as written up to Docker (its commands parsed, its variables resolved)."""

from __future__ import annotations

import os
import pathlib
import re
import secrets
import shlex
import shutil
import subprocess
import tomllib
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASE = ROOT / "docker-compose.yml"
SECURE = ROOT / "docker-compose.secure.yml"
APP_IMAGE = "onlinepredict"
# an exact version (1.2.3, v1.2.3, 3.11.10-slim-bookworm, 7.4.1-alpine) or a digest
PINNED = re.compile(r"^[\w./-]+(:v?\d+\.\d+\.\d+(-[\w.-]+)?)?(@sha256:[0-9a-f]{64})?$")
SECRET_NAME = re.compile(r"(KEY|KEYS|PASSWORD|SECRET)$")


def _load(path: pathlib.Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def _dotenv(path: pathlib.Path = ROOT / "deploy/.env.example") -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v
    return out


class Missing(Exception):
    """A ``${VAR:?message}`` with VAR unset or empty: compose refuses to start."""


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's interpolation: ``$$``, ``${VAR}``, ``${VAR:-default}``, ``${VAR:?err}``,
    ``$VAR``, applied to every string of a parsed file."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3)
        got = env.get(name, "")
        if op == ":?" and not got:
            raise Missing(f"{name}: {arg}")
        if op == ":-" and not got:
            return arg  # type: ignore[no-any-return]
        return got

    return re.sub(r"\$\$|\$\{(\w+)(?:(:[-?])([^}]*))?\}|\$(\w+)", one, value)


def _merge(base: Any, over: Any) -> Any:
    """Compose's merge of an override file, for what these files use: mappings merge,
    `command`/`entrypoint`/lists replace (ports, volumes: added)."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            if k in ("volumes", "tmpfs") and isinstance(v, list) and k in base:
                out[k] = [*base[k], *v]
            else:
                out[k] = _merge(base.get(k), v) if k in base else v
        return out
    return over


def _stack(env: dict[str, str], secure: bool = False) -> dict[str, Any]:
    doc = _load(BASE)
    if secure:
        doc = _merge(doc, _load(SECURE))
    return interpolate(doc, env)  # type: ignore[no-any-return]


def _filled_env(**extra: str) -> dict[str, str]:
    env = dict(_dotenv())
    for k in env:
        if SECRET_NAME.search(k) and k.startswith(("ONLINEPREDICT_API_KEY", "GRAFANA", "STACK")):
            env[k] = secrets.token_hex(32)
    env["ONLINEPREDICT_API_KEYS"] = ""
    env["ONLINEPREDICT_API_KEYS_FILE"] = ""
    return {**env, **extra}


def _container_env(svc: dict[str, Any], dotenv: dict[str, str]) -> dict[str, str]:
    """What a container's environment holds: its env_file (.env), then `environment`."""
    env: dict[str, str] = {}
    if any(f.get("path") == ".env" for f in svc.get("env_file", [])):
        env.update(dotenv)
    env.update({k: "" if v is None else str(v) for k, v in (svc.get("environment") or {}).items()})
    return env


def _app_services(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in stack["services"].items() if s.get("image", "").startswith(APP_IMAGE)}


# ---- images ----------------------------------------------------------------------------
def test_every_image_is_pinned_and_the_app_image_is_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for path in (BASE, SECURE):
        for name, svc in _load(path)["services"].items():
            if "image" in svc:
                assert PINNED.match(svc["image"]) and ":" in svc["image"], (path.name, name)
    assert _load(BASE)["x-app"]["image"] == f"{APP_IMAGE}:{version}"
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            assert PINNED.match(line.split()[1]), line


def test_the_app_image_is_built_once_and_reused() -> None:
    services = _stack(_filled_env())["services"]
    builders = [n for n, s in services.items() if "build" in s]
    assert builders == ["api"], builders
    users = _app_services(_stack(_filled_env()))
    assert len(users) >= 4 and {s["image"] for s in users.values()} == {services["api"]["image"]}


# ---- ports and listeners -----------------------------------------------------------------
@pytest.mark.parametrize("secure", [False, True], ids=["base", "secure"])
def test_every_published_port_is_on_loopback(secure: bool) -> None:
    stack = _stack(_filled_env(), secure)
    published = []
    for name, svc in stack["services"].items():
        assert svc.get("network_mode", "") in ("", "service:kafka"), name
        for port in svc.get("ports", []):
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), (name, port)
            published.append(name)
    assert {"api", "kafka", "prometheus", "grafana", "alertmanager"} <= set(published)
    assert "redis" not in published and "redis-exporter" not in published


def test_kafka_has_a_host_listener_and_an_internal_one() -> None:
    stack = _stack(_filled_env(STACK_KAFKA_PORT="19092"))
    kafka = stack["services"]["kafka"]
    env = kafka["environment"]
    listeners = dict(x.split("://") for x in env["KAFKA_LISTENERS"].split(","))
    advertised = dict(x.split("://") for x in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    protocols = dict(x.split(":") for x in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) <= set(protocols)
    # the containers' address is the internal listener's
    app_env = stack["services"]["worker-1"]["environment"]
    internal = next(
        n for n, a in advertised.items() if a == app_env["ONLINEPREDICT_KAFKA_BOOTSTRAP"]
    )
    assert internal != "HOST"
    # the host's: advertised as 127.0.0.1:<published port>, published from its container port
    assert advertised["HOST"] == "127.0.0.1:19092"
    host_port = listeners["HOST"].rsplit(":", 1)[1]
    assert kafka["ports"] == [f"127.0.0.1:19092:{host_port}"]
    # and the default is what the host's clients use without a setting
    default = _stack(_filled_env())["services"]["kafka"]["environment"]
    from service.config import Settings

    assert (
        f"HOST://{Settings.model_fields['kafka_bootstrap'].default}"
        in default["KAFKA_ADVERTISED_LISTENERS"]
    )


def test_api_port_and_metrics_listener() -> None:
    stack = _stack(_filled_env(STACK_API_PORT="18000"))
    api = stack["services"]["api"]
    env = api["environment"]
    assert api["ports"] == [f"127.0.0.1:18000:{env['ONLINEPREDICT_API_PORT']}"]
    assert env["ONLINEPREDICT_METRICS_HOST"] == "0.0.0.0"  # inside the network only
    prom = _load(ROOT / "deploy/prometheus/prometheus.yml")
    targets = {
        j["job_name"]: {t for sc in j["static_configs"] for t in sc["targets"]}
        for j in prom["scrape_configs"]
    }
    assert targets["onlinepredict-api"] == {f"api:{env['ONLINEPREDICT_METRICS_PORT']}"}
    assert env["ONLINEPREDICT_METRICS_PORT"] != env["ONLINEPREDICT_API_PORT"]
    exporter = stack["services"]["redis-exporter"]
    assert exporter["environment"]["REDIS_ADDR"] == "redis://redis:6379"
    assert targets["redis"] == {"redis-exporter:9121"}


# ---- secrets -----------------------------------------------------------------------------
def test_compose_fails_closed_without_the_api_key() -> None:
    with pytest.raises(Missing, match="ONLINEPREDICT_API_KEY"):
        _stack(_filled_env(ONLINEPREDICT_API_KEY=""))
    with pytest.raises(Missing, match="STACK_REDIS_API_PASSWORD"):
        _stack(_filled_env(STACK_REDIS_API_PASSWORD=""), secure=True)


# who may hold each secret (the API's clients hold the key: the replayer creates its model)
OWNERS = {
    "ONLINEPREDICT_API_KEY": {"api", "replayer"},
    "GRAFANA_ADMIN_PASSWORD": {"grafana"},
    "STACK_REDIS_API_PASSWORD": {"api", "redis"},
    "STACK_REDIS_WORKER_PASSWORD": {"worker-1", "worker-2", "redis"},
    "STACK_REDIS_EXPORTER_PASSWORD": {"redis-exporter", "redis"},
    "STACK_KAFKA_API_PASSWORD": {"api", "kafka-init"},
    "STACK_KAFKA_WORKER_PASSWORD": {"worker-1", "worker-2", "kafka-init"},
}


@pytest.mark.parametrize("secure", [False, True], ids=["base", "secure"])
def test_each_secret_reaches_only_the_process_that_uses_it(secure: bool) -> None:
    """With every secret set in .env (which env_file hands to the app containers), a
    secret's value is in the environment or command of its owners only."""
    dotenv = _filled_env()
    secret_vars = {k for k in dotenv if SECRET_NAME.search(k) and dotenv[k]}
    assert secret_vars == set(OWNERS), secret_vars ^ set(OWNERS)
    stack = _stack(dotenv, secure)
    for name, svc in stack["services"].items():
        seen = " ".join(
            [*_container_env(svc, dotenv).values(), str(svc.get("command", "")), str(svc)]
        )
        for var, owners in OWNERS.items():
            if dotenv[var] in seen:
                assert name in owners, f"{var} reaches {name}"
    # and the owners that must have it do
    api_env = _container_env(stack["services"]["api"], dotenv)
    assert api_env["ONLINEPREDICT_API_KEY"] == dotenv["ONLINEPREDICT_API_KEY"]
    for worker in ("worker-1", "worker-2"):
        env = _container_env(stack["services"][worker], dotenv)
        assert env["ONLINEPREDICT_API_KEY"] == "" and env["ONLINEPREDICT_API_KEYS"] == ""


def test_redis_is_capped_with_noeviction() -> None:
    stack = _stack(_filled_env(STACK_REDIS_MAXMEMORY="300mb"))
    for name, svc in stack["services"].items():
        if svc.get("image", "").startswith("redis:") and name != "redis-cluster-init":
            cmd = [str(c) for c in svc["command"]]
            assert cmd[cmd.index("--maxmemory") + 1] == "300mb", name
            assert cmd[cmd.index("--maxmemory-policy") + 1] == "noeviction", name


# ---- Prometheus and Alertmanager -----------------------------------------------------------
def test_prometheus_loads_the_rules_and_sends_to_alertmanager() -> None:
    stack = _stack(_filled_env())
    prom_svc = stack["services"]["prometheus"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prom_svc["volumes"]}
    config = _load(ROOT / "deploy/prometheus/prometheus.yml")
    for pattern in config["rule_files"]:
        folder = pathlib.PurePosixPath("/etc/prometheus") / pathlib.PurePosixPath(pattern).parent
        assert str(folder) in mounts, pattern
        assert list((ROOT / mounts[str(folder)]).glob(pathlib.PurePosixPath(pattern).name))
    (am,) = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    host, port = am.split(":")
    assert host in stack["services"] and stack["services"][host]["ports"][0].endswith(":" + port)
    if shutil.which("promtool"):
        out = subprocess.run(
            ["promtool", "check", "config", str(ROOT / "deploy/prometheus/prometheus.yml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stdout + out.stderr


def test_alertmanager_routes_to_declared_receivers() -> None:
    stack = _stack(_filled_env())
    am = stack["services"]["alertmanager"]
    src = next(v.split(":")[0] for v in am["volumes"] if v.endswith("alertmanager.yml:ro"))
    config = _load(ROOT / src)
    receivers = {r["name"] for r in config["receivers"]}

    def walk(route: dict[str, Any]) -> None:
        assert route.get("receiver", "default") in receivers, route
        for sub in route.get("routes", []):
            walk(sub)

    walk(config["route"])
    alerts = {
        r["alert"]
        for f in (ROOT / "deploy/prometheus/rules").glob("*.yml")
        for g in _load(f)["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    for rule in config.get("inhibit_rules", []):
        names = re.findall(r"Onlinepredict\w+", str(rule))
        assert names and set(names) <= alerts, names


# ---- the secure override -----------------------------------------------------------------
def test_secure_override_hardens_every_app_container() -> None:
    stack = _stack(_filled_env(), secure=True)
    for name, svc in _app_services(stack).items():
        assert svc.get("read_only") is True, name
        assert svc.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in svc.get("security_opt", []), name
        assert any(v.endswith(":/opt/numba-cache") for v in svc.get("volumes", [])), name
    assert (
        stack["services"]["replayer"]["command"][-3:-2] == ["http"]
        or "http" in (stack["services"]["replayer"]["command"])
    )


def test_secure_kafka_authenticates_every_reachable_listener() -> None:
    from service.config import Settings

    stack = _stack(_filled_env(), secure=True)
    env = stack["services"]["kafka"]["environment"]
    listeners = dict(x.split("://") for x in env["KAFKA_LISTENERS"].split(","))
    protocols = dict(x.split(":") for x in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    for name, address in listeners.items():
        if protocols[name] == "PLAINTEXT":  # no credentials: the broker's loopback only
            assert address.startswith("127.0.0.1:"), name
        else:
            assert protocols[name].startswith("SASL_"), name
            key = f"KAFKA_LISTENER_NAME_{name}_SCRAM___SHA___512_SASL_JAAS_CONFIG"
            assert "ScramLoginModule" in env[key], name
    assert env["KAFKA_SUPER_USERS"] == "User:ANONYMOUS"
    assert env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split("@")[1]
    assert voters == listeners["CONTROLLER"]
    init = stack["services"]["kafka-init"]
    assert init["network_mode"] == "service:kafka"
    script = init["command"][0]
    local = listeners["LOCAL"]
    assert f"--bootstrap-server {local}" in script
    # each principal: its password set, its ACLs for the topics and group the code uses
    d = Settings.model_fields
    events, dead, group = (
        d[k].default for k in ("events_topic", "deadletter_topic", "consumer_group")
    )
    acl = re.findall(
        r"--allow-principal User:(\S+)((?: --operation \w+)+) --(topic|group) ([^\s;]+)", script
    )
    grants = {(who, kind, res): set(ops.split(" --operation ")[1:]) for who, ops, kind, res in acl}
    assert grants == {
        ("onlinepredict-api", "topic", events): {"Write", "Describe"},
        ("onlinepredict-worker", "topic", events): {"Read", "Write", "Describe"},
        ("onlinepredict-worker", "topic", dead): {"Write", "Describe"},
        ("onlinepredict-worker", "group", group): {"Read"},
    }
    for role in ("api", "worker"):
        svc = stack["services"][role if role == "api" else "worker-1"]
        e = svc["environment"]
        assert e["ONLINEPREDICT_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
        assert e["ONLINEPREDICT_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
        user = e["ONLINEPREDICT_KAFKA_SASL_USERNAME"]
        assert user == f"onlinepredict-{role}"
        assert f"--entity-name {user} --add-config" in script
        # the shell of kafka-init reads the password from its own environment
        var = f"STACK_KAFKA_{role.upper()}_PASSWORD"
        assert f"password=${var}]" in script and init["environment"][var]
        assert e["ONLINEPREDICT_KAFKA_SASL_PASSWORD"] == init["environment"][var]


def test_secure_redis_users_match_the_acl_template() -> None:
    dotenv = _filled_env()
    stack = _stack(dotenv, secure=True)
    template = (ROOT / "deploy/redis/users.acl.template").read_text()
    users = dict(re.findall(r"^user (\S+) on >@(\w+)@", template, re.M))
    redis_svc = stack["services"]["redis"]
    for mount in redis_svc["volumes"]:
        src = mount.split(":")[0]
        if src.startswith("./"):
            assert (ROOT / src).exists(), src
    assert redis_svc["entrypoint"][-1] == "/etc/redis/start-with-acl.sh"
    # not root, and the file it writes is on a tmpfs that user owns
    uid = redis_svc["user"].split(":")[0]
    assert uid != "0" and redis_svc["read_only"] is True and redis_svc["cap_drop"] == ["ALL"]
    (tmpfs,) = redis_svc["tmpfs"]
    script = (ROOT / "deploy/redis/start-with-acl.sh").read_text()
    default = re.search(r"out=\$\{REDIS_ACL_FILE:-(\S+)\}", script)
    template = re.search(r"template=\$\{REDIS_ACL_TEMPLATE:-(\S+)\}", script)
    assert default and template
    assert tmpfs.split(":")[0] == str(pathlib.PurePosixPath(default.group(1)).parent)
    assert f"uid={uid}" in tmpfs
    assert any(v.endswith(f":{template.group(1)}:ro") for v in redis_svc["volumes"])
    for svc_name, user in (("api", "onlinepredict-api"), ("worker-1", "onlinepredict-worker")):
        url = stack["services"][svc_name]["environment"]["ONLINEPREDICT_REDIS_URL"]
        m = re.fullmatch(r"redis://([\w-]+):(\w+)@redis:6379/0", url)
        assert m and m.group(1) == user, url
        assert m.group(2) == dotenv[users[user]]  # the password the template gives that user
        assert redis_svc["environment"][users[user]] == m.group(2)
    exporter = stack["services"]["redis-exporter"]["environment"]
    assert exporter["REDIS_PASSWORD"] == dotenv[users[exporter["REDIS_USER"]]]


# ---- the README's compose block, run as written up to Docker -------------------------------
def _readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("**Compose testbed.**") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's compose section has no bash block"
    return [ln for ln in block.group(1).splitlines() if ln.strip()]


def _cli_params(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Parse ``onlinepredict <args>`` as the CLI would (options, environment), no run."""
    from typer.main import get_command

    from service.cli import app

    cmd: Any = get_command(app)
    args = list(args)
    while hasattr(cmd, "commands"):  # a group (typer's click may not be this click)
        name = args.pop(0)
        assert name in cmd.commands, f"onlinepredict has no command {name!r}"
        cmd = cmd.commands[name]
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        ctx = cmd.make_context(cmd.name or "", args)
    finally:
        os.environ.clear()
        os.environ.update(old)
    return dict(ctx.params)


def test_readme_compose_block_resolves_up_to_docker() -> None:
    """Each line of the block is understood here, or the test fails: files it writes,
    variables it sets and reads, compose started with a complete .env, every client
    command aimed at a published port with the key."""
    from service.api import create_app
    from service.config import Settings

    dotenv: dict[str, str] | None = None
    shell: dict[str, str] = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/")}
    routes = {
        (m.upper(), p)
        for p, ops in create_app(Settings(metrics_port=0)).openapi()["paths"].items()
        for m in ops
    }
    started = False
    key_users = 0

    def expand(word: str) -> str:
        return re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: shell[m.group(1) or m.group(2)], word)

    for line in _readme_block():
        words = shlex.split(line)
        if words[:3] == ["cp", "deploy/.env.example", ".env"]:
            dotenv = _dotenv()
        elif words[:2] == ["sed", "-i"] and words[-1] == ".env":
            assert dotenv is not None, "sed on .env before it exists"
            m = re.fullmatch(r"s/\^(\w+)=\.\*/\1=\$\(openssl rand -hex (\d+)\)/", words[2])
            assert m and m.group(1) in dotenv, line
            dotenv[m.group(1)] = secrets.token_hex(int(m.group(2)))
        elif words[:3] == ["docker", "compose", "up"]:
            assert dotenv is not None
            stack = _stack(dotenv)  # raises Missing if a required variable is unset
            started = True
        elif words[:3] == ["docker", "compose", "down"]:
            assert started
        elif words[0] == "export":
            assert dotenv is not None
            name, _, value = words[1].partition("=")
            m = re.fullmatch(r"\$\(sed -n 's/\^(\w+)=//p' \.env\)", value)
            assert m, line
            shell[name] = dotenv[m.group(1)]
        elif words[0] == "until":
            assert started
            url = next(w for w in words if w.startswith("http"))
            port = stack["services"]["api"]["ports"][0].split(":")[1]
            assert url == f"http://127.0.0.1:{port}/readyz", url
        elif words[0] == "curl":
            assert started
            url = next(w for w in words if w.startswith("http"))
            m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/\S*)", url)
            assert m, url
            assert f"127.0.0.1:{m.group(1)}:8000" in stack["services"]["api"]["ports"]
            method = words[words.index("-X") + 1] if "-X" in words else "GET"
            assert (method, m.group(2)) in routes, (method, m.group(2))
            header = expand(words[words.index("-H") + 1])
            assert header == f"X-API-Key: {dotenv['ONLINEPREDICT_API_KEY']}", "curl without the key"  # type: ignore[index]
            key_users += 1
        elif words[0] == "onlinepredict":
            assert started
            params = _cli_params(words[1:], shell)
            assert params.get("api_key") == dotenv["ONLINEPREDICT_API_KEY"], line  # type: ignore[index]
            api_port = stack["services"]["api"]["ports"][0].split(":")[1]
            assert params["api_url"] == f"http://127.0.0.1:{api_port}", params["api_url"]
            if params.get("via") == "kafka":
                advertised = stack["services"]["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
                # unset: the settings' default, as the replayer falls back to it
                bootstrap = params["bootstrap"] or Settings.model_fields["kafka_bootstrap"].default
                assert f"HOST://{bootstrap}" in advertised, bootstrap
            key_users += 1
        else:
            raise AssertionError(
                f"the README's compose block has a line this test does not know: {line}"
            )
    assert started and key_users >= 3
