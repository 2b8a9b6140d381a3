"""docker/ kept in step with itself: Docker does not run on these machines, so what a
`docker compose up` would catch late is checked here — every long-running service has a
healthcheck that names its own worker, docker/README.md lists every service with the pool it
really runs, every variable the compose files read is in .env.example, and Prometheus and
Grafana read the credentials and data source the overlay provides."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from app.config import PROJECT_ROOT

DOCKER = PROJECT_ROOT / "docker"
ONE_SHOT = {"migrate"}


def services(name: str) -> dict[str, dict[str, Any]]:
    return dict(yaml.safe_load((DOCKER / name).read_text())["services"])


def readme_rows() -> dict[str, str]:
    """Service → description, from the first table of docker/README.md's "Services"."""
    section = (DOCKER / "README.md").read_text().split("\n## Services\n")[1].strip()
    section = section.split("\n\n")[0]
    return dict(re.findall(r"^\| `([a-z-]+)` \| (.+) \|$", section, re.M))


def test_every_long_running_service_has_a_healthcheck() -> None:
    for file in ("compose.yaml", "monitoring.yaml"):
        for name, service in services(file).items():
            if name not in ONE_SHOT:
                assert service.get("healthcheck", {}).get("test"), f"{file}: {name}"


def test_worker_healthchecks_ping_their_own_node() -> None:
    for name, service in services("compose.yaml").items():
        if name.startswith("worker-"):
            command = service["command"]
            node = command[command.index("-n") + 1].replace("%h", "$$HOSTNAME")
            assert service["healthcheck"]["test"][-1].endswith(f"worker {node}"), name


def test_readme_names_every_service_and_its_pool() -> None:
    rows = readme_rows()
    for name, service in services("compose.yaml").items():
        assert name in rows, f"docker/README.md does not describe {name}"
        if name.startswith("worker-"):
            threads = "threads" in service["command"]
            pool = "thread pool" if threads else "prefork pool"
            assert pool in rows[name], (name, rows[name])


def test_every_variable_is_in_the_env_example() -> None:
    example = (DOCKER / ".env.example").read_text()
    documented = set(re.findall(r"^([A-Z_]+)=", example, re.M))
    for file in ("compose.yaml", "monitoring.yaml"):
        used = set(re.findall(r"\$\{([A-Z_]+)[:}]", (DOCKER / file).read_text()))
        assert used <= documented, (file, used - documented)


def test_prometheus_reads_what_the_overlay_writes() -> None:
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    api, flower = jobs["engram-api"], jobs["engram-flower"]
    assert api["metrics_path"] == "/metrics" and api["authorization"]["type"] == "Bearer"
    entrypoint = " ".join(services("monitoring.yaml")["prometheus"]["entrypoint"])
    files = [
        api["authorization"]["credentials_file"],
        flower["basic_auth"]["username_file"],
        flower["basic_auth"]["password_file"],
    ]
    for path in files:
        assert f"> {path}" in entrypoint, path


def test_the_dashboard_uses_the_provisioned_data_source() -> None:
    provisioned = yaml.safe_load(
        (DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text()
    )
    uid = provisioned["datasources"][0]["uid"]
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "engram.json").read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel["datasource"]["uid"] == uid, panel["title"]
        assert all(t["datasource"]["uid"] == uid and t["expr"] for t in panel["targets"])


def dashboard_metrics() -> set[str]:
    """Every engram_* metric the dashboard queries (for the scrape test to check)."""
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "engram.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    return {m for expr in exprs for m in re.findall(r"\bengram_[a-z_]+", expr)}


def test_the_dashboard_covers_the_metrics_asked_for() -> None:
    queried = dashboard_metrics()
    for needed in (
        "engram_stream_pending",
        "engram_stream_lag",
        "engram_stream_oldest_pending_age_seconds",
        "engram_dead_letters",
        "engram_extraction_backlog_turns",
        "engram_extraction_batches",
        "engram_job_runs",
        "engram_embedding_cache_lookups_total",
        "engram_api_request_duration_seconds_bucket",
    ):
        assert needed in queried, needed


def test_dockerfile_ships_the_healthcheck_module() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert "COPY workers ./workers" in dockerfile
    assert Path(PROJECT_ROOT / "workers" / "healthcheck.py").exists()
