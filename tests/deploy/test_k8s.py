"""Static validation of the Kubernetes manifests and the compose `cluster` profile (no
cluster or Docker engine runs here): schemas, then the references between the files."""

from __future__ import annotations

import functools
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
SECURE = ROOT / "deploy/k8s-secure"
K8S_VERSION = "1.30"  # the oldest Kubernetes the manifests are checked against

CORE = {
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
}
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
    ("monitoring.coreos.com/v1", "PrometheusRule"): {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["groups"],
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "additionalProperties": False,
                            "properties": {
                                "name": _STR,
                                "interval": _STR,
                                "rules": {"type": "array"},
                            },
                        },
                    }
                },
            }
        },
    },
    ("keda.sh/v1alpha1", "TriggerAuthentication"): {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["secretTargetRef"],
                "properties": {
                    "secretTargetRef": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["parameter", "name", "key"],
                            "additionalProperties": False,
                            "properties": {"parameter": _STR, "name": _STR, "key": _STR},
                        },
                    }
                },
            }
        },
    },
    ("kafka.strimzi.io/v1beta2", "KafkaUser"): {
        "type": "object",
        "required": ["spec", "metadata"],
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {
                    "labels": {"type": "object", "required": ["strimzi.io/cluster"]},
                },
            },
            "spec": {
                "type": "object",
                "required": ["authentication", "authorization"],
                "additionalProperties": False,
                "properties": {
                    "authentication": {
                        "type": "object",
                        "required": ["type"],
                        "properties": {"type": {"enum": ["scram-sha-512", "tls"]}},
                    },
                    "authorization": {
                        "type": "object",
                        "required": ["type", "acls"],
                        "properties": {
                            "type": {"const": "simple"},
                            "acls": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["resource", "operations"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "resource": {
                                            "type": "object",
                                            "required": ["type", "name"],
                                            "properties": {
                                                "type": {"enum": ["topic", "group", "cluster"]},
                                                "name": _STR,
                                                "patternType": {"enum": ["literal", "prefix"]},
                                            },
                                        },
                                        "operations": {
                                            "type": "array",
                                            "items": {
                                                "enum": [
                                                    "Read",
                                                    "Write",
                                                    "Describe",
                                                    "Create",
                                                    "Delete",
                                                    "Alter",
                                                    "DescribeConfigs",
                                                    "IdempotentWrite",
                                                ]
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
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


@functools.cache
def _kustomized(folder: pathlib.Path) -> str:
    out = subprocess.run(
        ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _rendered(folder: pathlib.Path) -> list[dict[str, Any]]:
    """What ``kubectl apply -k folder`` sends (patches and ``images`` applied); without
    kubectl, this test's own reading (base and ConfigMap-only overlays)."""
    if shutil.which("kubectl") is not None:
        return [d for d in yaml.safe_load_all(_kustomized(folder)) if d]
    if folder == SECURE:
        pytest.skip("kubectl is not installed: the secure overlay's patches need kustomize")
    return _resources(folder)


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


@pytest.mark.parametrize("folder", [K8S, OVERLAY, SECURE], ids=["base", "redis-cluster", "secure"])
def test_manifests_match_their_schemas(folder: pathlib.Path) -> None:
    docs = _rendered(folder)
    if folder == SECURE:  # applied in Kafka's namespace, not by the kustomization
        docs = docs + _load(SECURE / "kafka-users.yaml")
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


# Secrets the operator creates (docs/operations.md, "Kubernetes"), by the container that
# may read each: no manifest ships one (an empty Secret gave an open API)
SECRETS = {
    "onlinepredict-api-key": "api",
    "onlinepredict-kafka-api": "api",
    "onlinepredict-redis-api": "api",
    "onlinepredict-kafka-worker": "worker",
    "onlinepredict-redis-worker": "worker",
}
NOT_SETTINGS = {"REDIS_PASSWORD"}  # only expanded into ONLINEPREDICT_REDIS_URL ($(VAR))


@pytest.mark.parametrize("folder", [K8S, OVERLAY, SECURE], ids=["base", "redis-cluster", "secure"])
def test_env_sources_exist_and_name_settings(folder: pathlib.Path) -> None:
    docs = _rendered(folder)
    fields = set(Settings.model_fields)
    assert not [d for d in docs if d["kind"] == "Secret"], "a Secret in the manifests"
    for pod in _pods(docs):
        for c in pod["spec"]["containers"]:
            for src in c.get("envFrom", []):
                assert "secretRef" not in src, "secrets go by secretKeyRef to one container"
                _one(docs, "ConfigMap", src["configMapRef"]["name"])
            defined: set[str] = set()
            used: set[str] = set()
            for e in c.get("env", []):
                name = e["name"]
                assert (
                    name.removeprefix("ONLINEPREDICT_").lower() in fields or name in NOT_SETTINGS
                ), e
                for ref in re.findall(r"\$\((\w+)\)", e.get("value", "")):
                    assert ref in defined, f"{name} expands {ref} before it is defined"
                    used.add(ref)
                secret = e.get("valueFrom", {}).get("secretKeyRef")
                if secret:
                    assert SECRETS.get(secret["name"]) == c["name"], (c["name"], secret)
                    assert secret.get("optional", False) is False, secret  # required
                defined.add(name)
            assert defined & NOT_SETTINGS <= used, "a helper variable no setting expands"
    for key in _config(docs):
        assert key.removeprefix("ONLINEPREDICT_").lower() in fields, f"{folder.name}: {key}"
        assert not re.search(r"(KEY|PASSWORD|SECRET)$", key), f"a secret in the ConfigMap: {key}"


def test_the_api_key_is_required_by_the_api_alone() -> None:
    docs = _rendered(K8S)
    assert _config(docs)["ONLINEPREDICT_ENV"] == "production"  # no key: the API exits
    api = _one(docs, "Deployment", "onlinepredict-api")["spec"]["template"]["spec"]
    (container,) = api["containers"]
    env = {e["name"]: e for e in container["env"]}
    ref = env["ONLINEPREDICT_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "onlinepredict-api-key", "key": "ONLINEPREDICT_API_KEY"}
    worker = _one(docs, "Deployment", "onlinepredict-worker")["spec"]["template"]["spec"]
    assert "secretKeyRef" not in str(worker)
    # the kustomization tells how to create it
    assert (
        "kubectl create secret generic onlinepredict-api-key"
        in (K8S / "kustomization.yaml").read_text()
    )


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


# ---- image, disruption budgets, hardening, alerts -------------------------------------------
def _containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        c
        for pod in _pods(docs)
        for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
    ]


def test_the_image_is_named_in_one_place() -> None:
    (image,) = _kustomization(K8S)["images"]
    assert image["name"] == "onlinepredict" and image["newTag"] and "/" in image["newName"]
    for c in _containers(_resources(K8S)):
        assert c["image"] == image["name"], c["name"]  # no tag, no registry in the manifests
    if shutil.which("kubectl") is not None:
        for folder in (K8S, OVERLAY, SECURE):
            for c in _containers(_rendered(folder)):
                assert c["image"] == f"{image['newName']}:{image['newTag']}", c["name"]


def test_every_deployment_has_a_disruption_budget() -> None:
    docs = _resources()
    pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    for dep in (d for d in docs if d["kind"] == "Deployment"):
        labels = dep["spec"]["template"]["metadata"]["labels"]
        (pdb,) = [p for p in pdbs if p["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        spec = pdb["spec"]
        if "minAvailable" in spec:
            assert 1 <= spec["minAvailable"] < dep["spec"]["replicas"], dep["metadata"]["name"]
        else:
            assert spec["maxUnavailable"] == 1, dep["metadata"]["name"]


@pytest.mark.parametrize("folder", [K8S, OVERLAY, SECURE], ids=["base", "redis-cluster", "secure"])
def test_pods_run_hardened(folder: pathlib.Path) -> None:
    docs = _rendered(folder)
    dockerfile = (ROOT / "Dockerfile").read_text()
    numba_cache = re.search(r"NUMBA_CACHE_DIR=(\S+)", dockerfile.split("AS runtime")[1])
    assert numba_cache
    for pod in _pods(docs):
        spec = pod["spec"]
        ctx = spec["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec.get("automountServiceAccountToken") is False
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
        # numba writes its cache directory: a writable volume there, filled from the image
        emptydirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for c in spec["containers"]:
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            assert mounts.get(numba_cache.group(1)) in emptydirs, c["name"]
            assert mounts.get("/tmp") in emptydirs, c["name"]
        (init,) = spec["initContainers"]
        (m,) = init["volumeMounts"]
        assert f"cp -a {numba_cache.group(1)}/. {m['mountPath']}/" in " ".join(init["command"])


def test_servicemonitor_scrapes_the_metrics_listeners_only() -> None:
    docs = _resources()
    mon = _one(docs, "ServiceMonitor")
    assert [ep["port"] for ep in mon["spec"]["endpoints"]] == ["metrics"]
    api = _one(docs, "Deployment", "onlinepredict-api")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in api["env"]}
    port = next(p for p in api["ports"] if p["name"] == "metrics")["containerPort"]
    assert (
        env["ONLINEPREDICT_METRICS_PORT"] == str(port)
        and env["ONLINEPREDICT_METRICS_HOST"] == "0.0.0.0"
    )
    svc = _one(docs, "Service", "onlinepredict-api")
    assert {"name": "metrics", "port": port, "targetPort": "metrics"} in svc["spec"]["ports"]


def test_prometheusrule_is_the_rule_files() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "k8s_rule", ROOT / "deploy/prometheus/k8s_rule.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = K8S / "prometheusrule.yaml"
    assert path.read_text() == mod.render(), "stale: run python deploy/prometheus/k8s_rule.py"
    groups = []
    for f in sorted((ROOT / "deploy/prometheus/rules").glob("*.yml")):
        groups += _load(f)[0]["groups"]
    assert _one(_resources(), "PrometheusRule")["spec"]["groups"] == groups


# ---- the secure overlay ---------------------------------------------------------------------
def _env_of(docs: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    pod = _one(docs, "Deployment", deployment)["spec"]["template"]["spec"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["containers"][0]["env"]}


def test_secure_overlay_gives_each_role_its_own_principal() -> None:
    docs = _rendered(SECURE)
    config = _config(docs)
    assert config["ONLINEPREDICT_KAFKA_SECURITY_PROTOCOL"].startswith("SASL_")
    assert config["ONLINEPREDICT_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    template = (ROOT / "deploy/redis/users.acl.template").read_text()
    for role in ("api", "worker"):
        env = _env_of(docs, f"onlinepredict-{role}")
        user = f"onlinepredict-{role}"
        assert env["ONLINEPREDICT_KAFKA_SASL_USERNAME"] == user
        ref = env["ONLINEPREDICT_KAFKA_SASL_PASSWORD"]["secretKeyRef"]
        assert ref["name"] == f"onlinepredict-kafka-{role}"
        url = env["ONLINEPREDICT_REDIS_URL"]
        assert url.startswith(f"redis://{user}:$(REDIS_PASSWORD)@"), url
        assert env["REDIS_PASSWORD"]["secretKeyRef"]["name"] == f"onlinepredict-redis-{role}"
        assert re.search(rf"^user {user} on ", template, re.M), user
    # the Strimzi users: the same grants as compose's kafka-init (docker-compose.secure.yml)
    d = Settings.model_fields
    events, dead, group = (
        d[k].default for k in ("events_topic", "deadletter_topic", "consumer_group")
    )
    grants = {
        (u["metadata"]["name"], a["resource"]["type"], a["resource"]["name"]): set(a["operations"])
        for u in _load(SECURE / "kafka-users.yaml")
        for a in u["spec"]["authorization"]["acls"]
    }
    assert grants == {
        ("onlinepredict-api", "topic", events): {"Write", "Describe"},
        ("onlinepredict-worker", "topic", events): {"Read", "Write", "Describe"},
        ("onlinepredict-worker", "topic", dead): {"Write", "Describe"},
        ("onlinepredict-worker", "group", group): {"Read", "Describe"},
        ("onlinepredict-keda", "topic", events): {"Describe"},
        ("onlinepredict-keda", "group", group): {"Describe"},
    }
    # KEDA reads the lag with its own principal
    so = _one(docs, "ScaledObject")
    (trigger,) = so["spec"]["triggers"]
    auth = _one(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
    assert {r["parameter"] for r in auth["spec"]["secretTargetRef"]} == {
        "sasl",
        "username",
        "password",
    }
    assert {r["name"] for r in auth["spec"]["secretTargetRef"]} == {"onlinepredict-kafka-keda"}


def test_secure_overlay_network_policies() -> None:
    docs = _rendered(SECURE)
    config = _config(docs)
    kafka_port = int(config["ONLINEPREDICT_KAFKA_BOOTSTRAP"].rsplit(":", 1)[1])
    redis_port = int(re.search(r":(\d+)/", config["ONLINEPREDICT_REDIS_URL"]).group(1))  # type: ignore[union-attr]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    for dep in (d for d in docs if d["kind"] == "Deployment"):
        labels = dep["spec"]["template"]["metadata"]["labels"]
        (pol,) = [
            p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        ]
        assert set(pol["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        container_ports = {
            p["containerPort"]
            for c in dep["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
        }
        allowed = {p["port"] for rule in pol["spec"]["ingress"] for p in rule["ports"]}
        assert allowed == container_ports, (dep["metadata"]["name"], allowed, container_ports)
        for rule in pol["spec"]["ingress"]:  # only the API port is open to everyone
            if "from" not in rule:
                assert [p["port"] for p in rule["ports"]] == [8000]
        egress = {p["port"] for rule in pol["spec"]["egress"] for p in rule["ports"]}
        assert egress == {kafka_port, redis_port, 53}, egress


# ---- Kafka and Redis for the base (deploy/k8s-deps: Strimzi, the Bitnami chart) ------------
def test_kafka_and_redis_of_k8s_deps_match_the_configmap() -> None:
    config = _config(_resources())
    kafka_docs = _load(ROOT / "deploy/k8s-deps/strimzi-kafka.yaml")
    kafka = _one(kafka_docs, "Kafka")
    (listener,) = kafka["spec"]["kafka"]["listeners"]
    # Strimzi names the bootstrap Service <cluster>-kafka-bootstrap
    host, port = config["ONLINEPREDICT_KAFKA_BOOTSTRAP"].rsplit(":", 1)
    assert host.split(".")[0] == f"{kafka['metadata']['name']}-kafka-bootstrap"
    assert int(port) == listener["port"]
    topics = {d["metadata"]["name"]: d["spec"] for d in kafka_docs if d["kind"] == "KafkaTopic"}
    assert topics[_setting(config, "events_topic")]["partitions"] == int(
        config["ONLINEPREDICT_PARTITIONS"]
    )
    assert _setting(config, "deadletter_topic") in topics
    assert kafka["spec"]["kafka"]["config"]["auto.create.topics.enable"] is False
    for pool in (d for d in kafka_docs if d["kind"] == "KafkaNodePool"):
        assert pool["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"]
    values = _load(ROOT / "deploy/k8s-deps/bitnami-redis-values.yaml")[0]
    for role in ("master", "replica"):
        flags = " ".join(values[role]["extraFlags"])
        assert (
            re.search(r"--maxmemory \d+[kmg]b", flags) and "--maxmemory-policy noeviction" in flags
        )
    # the chart's master Service, released as `redis`
    assert re.match(r"redis://redis-master\.", config["ONLINEPREDICT_REDIS_URL"])
    assert values["metrics"]["enabled"] is True
