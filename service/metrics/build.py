"""``onlinepredict_build_info{version,python}``: one constant series per process (API and
worker), so dashboards can show which release is running where."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from functools import lru_cache
from importlib import metadata

from prometheus_client.core import GaugeMetricFamily, Metric


@lru_cache
def version() -> str:
    try:
        return metadata.version("onlinepredict")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


class BuildInfoCollector:
    def collect(self) -> Iterator[Metric]:
        fam = GaugeMetricFamily(
            "onlinepredict_build_info",
            "Always 1; the labels say which onlinepredict and Python this process runs.",
            labels=["version", "python"],
        )
        fam.add_metric([version(), platform.python_version()], 1.0)
        yield fam
