"""Static validation of the Kubernetes manifests and the compose `cluster` profile (no
cluster or Docker engine runs here): schemas, then the references between the files."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from service.config import Settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy/k8s"
OVERLAY = ROOT / "deploy/k8s-redis-cluster"
K8S_VERSION = "1.30"  # the oldest Kubernetes the manifests are checked against

CORE = {("apps/v1", "Deployment"), ("v1", "Service"), ("v1", "ConfigMap"), ("v1", "Secret")}
# custom resources: checked against the fields we use (KEDA and Prometheus-operator docs)
_STR = {"type": "string"}
_INT = {"type": "integer", "minimum": 0}
CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("keda.sh/v1alpha1", "ScaledObject"): {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["scaleTargetRef", "triggers", "minReplicaCount", "maxReplicaCount"],
                "additionalProperties": False,
                "properties": {
                    "scaleTargetRef": {
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {"apiVersion": _STR, "kind": _STR, "name": _STR},
                    },
                    "minReplicaCount": _INT,
                    "maxReplicaCount": {"type": "integer", "minimum": 1},
                    "pollingInterval": _INT,
                    "cooldownPeriod": _INT,
                    "advanced": {"type": "object"},
                    "triggers": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["type", "metadata"],
                            "properties": {
                                "type": _STR,
                                # KEDA reads every trigger metadata value as a string
                                "metadata": {"type": "object", "additionalProperties": _STR},
                            },
                        },
                    },
                },
            }
        },
    },
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "properties": {
                    "selector": {"type": "object", "required": ["matchLabels"]},
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"type": "object", "required": ["port"]},
                    },
                },
            }
        },
    },
}
KAFKA_TRIGGER_KEYS = {  # KEDA's kafka scaler parameters
    "bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold",
    "offsetResetPolicy", "allowIdleConsumers", "scaleToZeroOnInvalidOffset",
    "excludePersistentLag", "version", "partitionLimitation", "limitToPartitionsWithLag",
}  # fmt: skip


def _load(path: pathlib.Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kustomization(folder: pathlib.Path) -> dict[str, Any]:
    return _load(folder / "kustomization.yaml")[0]


def _resources(folder: pathlib.Path = K8S) -> list[dict[str, Any]]:
    """The objects the kustomization in ``folder`` lists (patches applied: strategic merge
    of ``data`` for ConfigMaps, the only kind patched here)."""
    kust = _kustomization(folder)
    docs: list[dict[str, Any]] = []
    for res in kust["resources"]:
        target = (folder / res).resolve()
        docs += _resources(target) if target.is_dir() else _load(target)
    for patch in kust.get("patches", []):
        for p in _load(folder / patch["path"]):
            hit = [d for d in docs if (d["kind"], d["metadata"]["name"]) == _ident(p)]
            assert hit, f"{folder.name}: patch {patch['path']} matches no resource {_ident(p)}"
            assert p["kind"] == "ConfigMap", "only ConfigMap patches are merged by this test"
            hit[0] = {**hit[0], "data": {**hit[0].get("data", {}), **p["data"]}}
            docs = [hit[0] if _ident(d) == _ident(p) else d for d in docs]
    return docs


def _ident(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
    return hits[0]


def _config(docs: list[dict[str, Any]]) -> dict[str, str]:
    return dict(_one(docs, "ConfigMap", "onlinepredict-config")["data"])


def _setting(config: dict[str, str], name: str) -> str:
    """The value the pods get for a setting: the ConfigMap's, else the code's default."""
    return config.get(f"ONLINEPREDICT_{name.upper()}", str(Settings.model_fields[name].default))


# ---- every file parses and has a known shape ----------------------------------------------
def test_every_manifest_is_in_the_kustomization() -> None:
    listed = set(_kustomization(K8S)["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk, f"not applied by `kubectl apply -k`: {on_disk - listed}"


@pytest.mark.parametrize("folder", [K8S, OVERLAY], ids=["base", "redis-cluster"])
def test_manifests_match_their_schemas(folder: pathlib.Path) -> None:
    docs = _resources(folder)
    names = [_ident(d) for d in docs]
    assert len(names) == len(set(names)), f"duplicate objects: {names}"
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"]), key
        if key in CORE:  # the Kubernetes OpenAPI schema; strict: unknown fields fail
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        elif key in CRD_SCHEMAS:
            jsonschema.validate(doc, CRD_SCHEMAS[key])
        else:
            raise AssertionError(f"unknown apiVersion/kind {key} in {folder.name}")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("folder", [K8S, OVERLAY], ids=["base", "redis-cluster"])
def test_kustomize_renders_what_this_test_reads(folder: pathlib.Path) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted(_ident(d) for d in rendered) == sorted(_ident(d) for d in _resources(folder))
    assert _config(rendered) == _config(_resources(folder))


# ---- references between the objects -------------------------------------------------------
def _pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d["spec"]["template"] for d in docs if d["kind"] == "Deployment"]


def test_deployments_select_their_own_pods() -> None:
    for dep in (d for d in _resources() if d["kind"] == "Deployment"):
        match = dep["spec"]["selector"]["matchLabels"]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert match.items() <= labels.items(), dep["metadata"]["name"]


def test_services_select_pods_and_name_their_ports() -> None:
    docs = _resources()
    for svc in (d for d in docs if d["kind"] == "Service"):
        sel = svc["spec"]["selector"]
        pods = [p for p in _pods(docs) if sel.items() <= p["metadata"]["labels"].items()]
        assert pods, f"Service {svc['metadata']['name']} selects no pod"
        for port in svc["spec"]["ports"]:
            for pod in pods:
                names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
                assert port["targetPort"] in names, (svc["metadata"]["name"], port)


def test_servicemonitor_scrapes_named_service_ports() -> None:
    docs = _resources()
    mon = _one(docs, "ServiceMonitor")
    sel = mon["spec"]["selector"]["matchLabels"]
    ports = {
        p["name"]
        for d in docs
        if d["kind"] == "Service" and sel.items() <= d["metadata"]["labels"].items()
        for p in d["spec"]["ports"]
    }
    for ep in mon["spec"]["endpoints"]:
        assert ep["port"] in ports, ep


def test_env_sources_exist_and_name_settings() -> None:
    docs = _resources()
    fields = set(Settings.model_fields)
    for pod in _pods(docs):
        for c in pod["spec"]["containers"]:
            for src in c.get("envFrom", []):
                for kind, ref in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if ref in src:
                        _one(docs, kind, src[ref]["name"])
            for e in c.get("env", []):
                assert e["name"].removeprefix("ONLINEPREDICT_").lower() in fields, e
    for folder in (K8S, OVERLAY):
        for key in _config(_resources(folder)):
            assert key.removeprefix("ONLINEPREDICT_").lower() in fields, f"{folder.name}: {key}"


def test_keda_scales_the_worker_deployment_within_the_partitions() -> None:
    docs = _resources()
    config = _config(docs)
    partitions = int(_setting(config, "partitions"))
    so = _one(docs, "ScaledObject")
    ref = so["spec"]["scaleTargetRef"]
    worker = _one(docs, ref.get("kind", "Deployment"), ref["name"])
    assert ref.get("apiVersion", "apps/v1") == worker["apiVersion"]
    assert worker["spec"]["template"]["spec"]["containers"][0]["args"] == ["worker"]
    spec = so["spec"]
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"] <= partitions
    assert worker["spec"]["replicas"] <= spec["maxReplicaCount"]
    # a rollout must not add a pod beyond the partition count either
    assert worker["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert set(meta) <= KAFKA_TRIGGER_KEYS, set(meta) - KAFKA_TRIGGER_KEYS
    assert meta["allowIdleConsumers"] == "false"
    assert meta["bootstrapServers"] == _setting(config, "kafka_bootstrap")
    assert meta["consumerGroup"] == _setting(config, "consumer_group")
    assert meta["topic"] == _setting(config, "events_topic")
    assert int(meta["lagThreshold"]) > 0
    # a partition without a committed offset is read from its start by the workers
    assert meta["offsetResetPolicy"] == "earliest"


def test_redis_cluster_overlay_changes_only_redis() -> None:
    base, cluster = _resources(K8S), _resources(OVERLAY)
    assert [_ident(d) for d in base] == [_ident(d) for d in cluster]
    for b, c in zip(base, cluster, strict=True):
        if b["kind"] != "ConfigMap":
            assert b == c, _ident(b)
    b_cfg, c_cfg = _config(base), _config(cluster)
    changed = {k for k in b_cfg.keys() | c_cfg.keys() if b_cfg.get(k) != c_cfg.get(k)}
    assert changed == {"ONLINEPREDICT_REDIS_MODE", "ONLINEPREDICT_REDIS_URL"}, changed
    assert c_cfg["ONLINEPREDICT_REDIS_MODE"] == "cluster"
    assert b_cfg["ONLINEPREDICT_REDIS_MODE"] == "standalone"
    assert c_cfg["ONLINEPREDICT_REDIS_URL"].startswith("redis")


# ---- compose: partitions and the `cluster` profile ------------------------------------------
def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def test_compose_workers_fit_the_partitions() -> None:
    services = _compose()["services"]
    init = " ".join(services["kafka-init"]["command"])
    created = re.search(r"--topic onlinepredict\.events --partitions (\d+)", init)
    assert created, init
    workers = [s for s in services.values() if s.get("command") == ["worker"]]
    for svc in workers:
        assert svc["environment"]["ONLINEPREDICT_PARTITIONS"] == created.group(1)
    assert len(workers) <= int(created.group(1))


def test_compose_cluster_profile_is_complete() -> None:
    services = _compose()["services"]
    profiled = {n for n, s in services.items() if "cluster" in s.get("profiles", [])}
    nodes = sorted(n for n in profiled if re.fullmatch(r"redis-node-\d+", n))
    assert len(nodes) >= 6 and "redis-cluster-init" in profiled  # 3 masters + 3 replicas
    init = services["redis-cluster-init"]
    assert set(init["depends_on"]) == set(nodes)
    script = init["command"][0]
    assert "--cluster create" in script and "--cluster-replicas 1" in script
    count = re.search(r"for n in ([\d ]+); do", script)
    assert count and [f"redis-node-{i}" for i in count.group(1).split()] == nodes
    for name in nodes:
        cmd = services[name]["command"]
        assert cmd[cmd.index("--cluster-enabled") + 1] == "yes", name
        assert cmd[cmd.index("--cluster-announce-hostname") + 1] == name, name
        assert services[name]["volumes"][0].split(":")[0] in _compose()["volumes"], name
    # a service outside the profile may wait for one inside it only optionally
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            if dep in profiled and name not in profiled:
                assert cond.get("required") is False, f"{name} needs {dep} of the profile"
    # the app's Redis: standalone by default, a cluster node when the profile's settings are set
    env = services["api"]["environment"]
    mode = re.fullmatch(r"\$\{STACK_REDIS_MODE:-(\w+)\}", env["ONLINEPREDICT_REDIS_MODE"])
    url = re.fullmatch(
        r"\$\{STACK_REDIS_URL:-redis://([\w-]+):\d+/\d+\}", env["ONLINEPREDICT_REDIS_URL"]
    )
    assert mode and mode.group(1) == "standalone" and url and url.group(1) == "redis"
    example = (ROOT / "deploy/.env.example").read_text()
    hint = re.search(r"STACK_REDIS_URL=redis://([\w-]+):\d+\.?\n", example)
    assert hint and hint.group(1) in nodes, "deploy/.env.example must name a cluster node"
