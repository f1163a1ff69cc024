"""``onlinepredict up`` / ``--observe`` wiring, without starting processes: one metrics port
per worker, and a Prometheus config with the same jobs as the compose testbed's."""

from __future__ import annotations

import yaml

from service.config import Settings
from service.embedded.observe import prometheus_config
from service.embedded.up import Stack
from tests.service.conftest import ROOT


def test_each_worker_gets_its_own_metrics_port() -> None:
    fixed = Stack(Settings(worker_metrics_port=9100), workers=3)
    assert [fixed._worker_port(i) for i in range(3)] == [9100, 9101, 9102]
    for observe in (True, False):  # exposed under plain `up` too: lag is visible there
        free = Stack(Settings(), workers=3, observe=observe)
        ports = [free._worker_port(i) for i in range(3)]
        assert len(set(ports)) == 3 and all(ports)
    # on a laptop the metrics stay on loopback, like the API; a served API opens them too
    assert Stack(Settings())._metrics_host() == "127.0.0.1"
    assert Stack(Settings(api_host="0.0.0.0"))._metrics_host() == "0.0.0.0"


def test_local_prometheus_scrapes_api_and_every_worker_like_compose() -> None:
    cfg = yaml.safe_load(prometheus_config("127.0.0.1:8000", ["127.0.0.1:9100", "127.0.0.1:9101"]))
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in cfg["scrape_configs"]}
    assert jobs == {
        "onlinepredict-api": ["127.0.0.1:8000"],
        "onlinepredict-worker": ["127.0.0.1:9100", "127.0.0.1:9101"],
    }
    compose = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    # compose scrapes Redis too (redis_exporter, for the memory alert); the app's jobs agree
    assert {j["job_name"] for j in compose["scrape_configs"]} - {"redis"} == set(jobs)
    assert Settings().prometheus_port == 9090
