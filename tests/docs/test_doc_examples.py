"""Every ```python and ```bash example of the documentation (docs/ and the README) runs.

The runner and the comments that mark what a test cannot run are in tests/docs/_examples.py.

One test per page: its examples run in order in a fresh working directory, with no
``LAKEWARDEN_*`` setting from the environment, this checkout's ``lakewarden`` on the path and
the virtualenv's ``bin`` first on ``PATH`` (so ``lakewarden`` and ``python`` are this
project's). Pages that need Spark or the local stack say so (``<!-- docs-test: ... -->``) and
run with the slow tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _examples import Page, discover, parse_page, run_page

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# The README's examples are the first a reader runs: they are checked like the site's.
PAGES = [parse_page((REPO / "README.md").read_text(), page="README.md"), *discover(DOCS)]


def _param(page: Page) -> object:
    marks = []
    if page.needs:
        # A local stack and a Spark session start in a minute or two on a loaded machine.
        marks += [pytest.mark.slow, pytest.mark.timeout(1200)]
    if "spark" in page.needs:
        marks.append(pytest.mark.spark)
    if "stack" in page.needs:
        marks.append(pytest.mark.kafka)
    if "s3" in page.needs:
        marks.append(pytest.mark.s3)
    return pytest.param(page, id=page.path, marks=marks)


def page_env(cwd: Path) -> dict[str, str]:
    """The environment of a page's examples: no LAKEWARDEN_* of the caller's."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LAKEWARDEN_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
    env["LAKEWARDEN_STATE_DIR"] = str(cwd / ".lakewarden-state")
    # Spark in local mode: workers run this interpreter, the driver binds to loopback.
    env["PYSPARK_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@contextlib.contextmanager
def local_stack(state_dir: Path) -> Iterator[dict[str, str]]:
    """Kafka and every service on free ports, as ``make demo`` runs them; yields the
    settings (environment variables) that name the broker."""
    from lakewarden.devstack import SERVICES, DevSettings, DevStack
    from lakewarden.settings import Settings

    stack = DevStack(state_dir, Settings(state_dir=state_dir))
    services = [dataclasses.replace(spec, health_port=0) for spec in SERVICES]
    try:
        record = stack.up(
            dev=DevSettings(kafka_port=0, kafka_controller_port=0),
            with_s3=False,
            services=services,
        )
        yield {"LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS": str(record.bootstrap_servers)}
    finally:
        stack.down()


def s3_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The session's SeaweedFS with a bucket ``lakewarden``, as ``dev up --s3`` exports it."""
    endpoint = request.getfixturevalue("seaweed_s3")
    endpoint.create_bucket(DOCS_BUCKET)  # idempotent
    return {
        "LAKEWARDEN_S3__ENDPOINT_URL": endpoint.endpoint_url,
        "LAKEWARDEN_S3__REGION": endpoint.region,
        "LAKEWARDEN_S3__ACCESS_KEY_ID": endpoint.access_key,
        "LAKEWARDEN_S3__SECRET_ACCESS_KEY": endpoint.secret_key,
    }


DOCS_BUCKET = "lakewarden"


@pytest.mark.parametrize("page", [_param(page) for page in PAGES])
def test_examples_run(
    page: Page, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = page_env(work)
    if "s3" in page.needs:
        env.update(s3_env(request))
    with contextlib.ExitStack() as stack:
        if "stack" in page.needs:
            # In the page's state folder, as `make up` does: `lakewarden dev status` finds it.
            state_dir = Path(env["LAKEWARDEN_STATE_DIR"])
            env.update(stack.enter_context(local_stack(state_dir)))
        done = run_page(page, cwd=work, env=env, timeout_s=1000 if page.needs else 250)
    with capsys.disabled():
        skipped = ", ".join(f"{b.where} ({b.skip_reason})" for b in page.skipped)
        print(
            f"\n{page.path}: {len(page.runnable)} examples run, {len(page.skipped)} skipped"
            + (f": {skipped}" if skipped else "")
        )
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}"


def test_every_page_parses() -> None:
    """A malformed fence or a stray no-test comment fails here, not silently."""
    for path in sorted(DOCS.rglob("*.md")):
        parse_page(path.read_text(), page=str(path))


def test_a_failing_example_fails(tmp_path: Path) -> None:
    page = parse_page(
        "# p\n\n```python\nx = 1\n```\n\n<!-- no-test: shown only -->\n```bash\nexit 3\n```\n"
        "\n```bash\ntest -f made.txt || exit 4\n```\n"
        "```python\nopen('made.txt', 'w').write(str(x))\nassert x == 2, 'x is 1'\n```\n",
        page="p.md",
    )
    assert [b.skip_reason for b in page.blocks] == [None, "shown only", None, None]
    done = run_page(page, cwd=tmp_path, env=page_env(tmp_path), timeout_s=60)
    assert done.returncode == 1
    assert "the bash example at p.md:12 exited 4" in done.stderr

    page = dataclasses.replace(page, blocks=(page.blocks[0], page.blocks[3], page.blocks[2]))
    done = run_page(page, cwd=tmp_path, env=page_env(tmp_path), timeout_s=60)
    assert done.returncode == 1
    assert "AssertionError: x is 1" in done.stderr
    assert "the python example at p.md:15" in done.stderr
    assert (tmp_path / "made.txt").read_text() == "1"  # the blocks share one namespace and cwd


def test_stray_markers_are_errors() -> None:
    with pytest.raises(ValueError, match="no-test comment before no example"):
        parse_page("<!-- no-test: x -->\ntext\n", page="p.md")
    with pytest.raises(ValueError, match="unclosed code fence"):
        parse_page("```python\nx = 1\n", page="p.md")
    with pytest.raises(ValueError, match="unknown docs-test need"):
        parse_page("<!-- docs-test: docker -->\n", page="p.md")
    assert parse_page("<!-- docs-test: spark, s3 -->\n", page="p.md").needs == {"spark", "s3"}
