"""The alert rules of deploy/prometheus/rules/: valid (`promtool check rules`), unit-tested
(`promtool test rules`, a firing and a quiet case for every alert), built on metrics the
code exports, and each with its runbook section in docs/operations.md."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES = sorted((ROOT / "deploy/prometheus/rules").glob("*.yml"))
TESTS = sorted((ROOT / "deploy/prometheus/tests").glob("*_test.yml"))
# series from elsewhere: Prometheus itself, and redis_exporter (compose's redis-exporter)
FOREIGN = {"up", "redis_memory_used_bytes", "redis_memory_max_bytes"}

promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian's prometheus package; make system-deps)",
)


def _rules() -> list[dict[str, Any]]:
    return [r for f in RULES for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"]]


def _alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in _rules() if "alert" in r}


def _promtool(*args: str, cwd: pathlib.Path = ROOT) -> str:
    out = subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@promtool
def test_promtool_checks_the_rules() -> None:
    assert RULES
    _promtool("check", "rules", *map(str, RULES))


@promtool
def test_promtool_unit_tests_pass() -> None:
    assert TESTS
    for path in TESTS:
        out = _promtool("test", "rules", path.name, cwd=path.parent)
        assert "SUCCESS" in out, out


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in TESTS:
        doc = yaml.safe_load(path.read_text())
        loaded = {(path.parent / f).resolve() for f in doc["rule_files"]}
        assert loaded == {f.resolve() for f in RULES}, "the tests must load every rule file"
        for test in doc["tests"]:
            for case in test.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    alerts = set(_alerts())
    assert alerts - firing == set(), f"no firing case: {alerts - firing}"
    assert alerts - quiet == set(), f"no quiet case: {alerts - quiet}"
    assert (firing | quiet) <= alerts, "a test names an alert no rule defines"


def test_issue_34_alerts_exist() -> None:
    """Model halted or refusing, lag, checkpoint age, dead letters, worker down, regret
    slope and tracking error per model, Redis memory, API 5xx and 429."""
    exprs = {name: rule["expr"] for name, rule in _alerts().items()}
    text = " ".join(exprs.values())
    for needle in (
        "onlinepredict_model_halted",
        "onlinepredict_model_refused_share",
        'outcome="rejected"',
        "onlinepredict:consumer_lag:max",
        "onlinepredict_checkpoint_age_seconds",
        "onlinepredict_worker_deadletter_total",
        'up{job=~"onlinepredict-worker.*"}',
        "onlinepredict:threshold:regret_per_event",
        "onlinepredict:threshold:tracking_error",
        "redis_memory_max_bytes",
        'status=~"5.."',
        'status="429"',
    ):
        assert needle in text, needle


def test_rules_use_metrics_the_code_exports() -> None:
    from service.metrics.exposition import _GAUGES, PREFIX

    source = "\n".join(p.read_text() for p in (ROOT / "service").rglob("*.py"))
    emitted = set(re.findall(r'"(onlinepredict_[a-z_]+)"', source))
    emitted |= {PREFIX + s for s in re.findall(r'PREFIX \+ "([a-z_]+)"', source)}
    emitted |= {PREFIX + s for s in re.findall(r'f"onlinepredict_worker_\{name\}"', source)}
    emitted |= {f"onlinepredict_worker_{n}" for n in re.findall(r'\(\s*"(\w+)",\s*"', source)}
    emitted |= {PREFIX + suffix for suffix, _, _ in _GAUGES.values()}
    recorded = {r["record"] for r in _rules() if "record" in r}
    names: set[str] = set()
    for rule in _rules():
        # metric names: not PromQL functions, keywords, labels or strings
        expr = re.sub(r'"[^"]*"', "", rule["expr"])
        expr = re.sub(r"\{[^}]*\}", "", expr)
        names |= {
            n
            for n in re.findall(r"\b([a-z_:][a-z0-9_:]*)\b(?!\s*\()", expr)
            if n.startswith(("onlinepredict", "redis_", "up"))
        }
    assert names
    for name in sorted(names):
        base = re.sub(r"_(bucket|count|sum|total|info)$", "", name)
        # a per-model threshold may have no model line yet: its default is recorded
        optional = name.startswith("onlinepredict:threshold:") and f"{name}:default" in recorded
        ok = name in recorded or optional or name in FOREIGN or name in emitted or base in emitted
        assert ok, f"the rules read {name}; no code exports it"


def test_every_alert_has_its_runbook_section() -> None:
    ops = (ROOT / "docs/operations.md").read_text()
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#{2,4} (.+)$", ops, re.M)
    }
    for name, rule in _alerts().items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        runbook = rule["annotations"]["runbook"]
        assert runbook == f"docs/operations.md#{name.lower()}", runbook
        assert name.lower() in headings, f"docs/operations.md has no section {name}"
        section = ops[ops.index(f"### {name}") :].split("\n### ")[0]
        assert "What it means" in section and "What to do" in section, name
