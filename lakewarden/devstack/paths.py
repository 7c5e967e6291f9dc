"""Where the dev stack finds its infrastructure files (``infra/`` at the repository root)."""

from __future__ import annotations

from pathlib import Path

# lakewarden/devstack/paths.py -> repository root. The dev stack runs from a source checkout
# (`make setup` installs the project in editable mode); containers use docker-compose instead.
REPO_ROOT = Path(__file__).resolve().parents[2]
INFRA_DIR = REPO_ROOT / "infra"
