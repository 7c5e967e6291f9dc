"""The fenced examples of the documentation pages, and the driver that runs one page's.

A page's ```` ```python ```` and ```` ```bash ```` blocks are its examples. They run in page
order in one fresh working directory, the Python blocks in one shared namespace (a later block
uses what an earlier one defined, as a reader of the page does) and each bash block in
``bash -euo pipefail``, so a later block can use an earlier one's table.

Two HTML comments, invisible on the site, say what a test cannot do by itself:

- ``<!-- no-test: why -->`` right before a fence (blank lines between are allowed): the block
  is not run (Docker, ``make demo``, a server that runs until stopped). The test reports how
  many blocks it skipped; keep them rare.
- ``<!-- docs-test: spark -->``, ``<!-- docs-test: stack -->`` or ``<!-- docs-test: s3 -->``
  anywhere in a page (several: ``spark, stack``): its examples need a local Spark session (the
  page starts its own), the local stack (Kafka and the services, which the test starts and
  names in ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS``) or an S3 endpoint (SeaweedFS with a bucket
  ``lakewarden``, named in ``LAKEWARDEN_S3__*``, as ``lakewarden dev up --s3`` prints them).
  Such pages run with the slow tests.

Other fences (``text``, ``console``, ``yaml`` ...) are shown, never run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

RUN_LANGUAGES = ("python", "bash")
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
_NO_TEST = re.compile(r"^\s*<!--\s*no-test:\s*(?P<why>.+?)\s*-->\s*$")
_NEEDS = re.compile(r"<!--\s*docs-test:\s*(?P<needs>[^>]*?)\s*-->")
KNOWN_NEEDS = frozenset({"spark", "stack", "s3"})


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced example of a page."""

    page: str
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    skip_reason: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass(frozen=True, slots=True)
class Page:
    path: str
    blocks: tuple[Block, ...]
    needs: frozenset[str]

    @property
    def runnable(self) -> tuple[Block, ...]:
        return tuple(block for block in self.blocks if block.skip_reason is None)

    @property
    def skipped(self) -> tuple[Block, ...]:
        return tuple(block for block in self.blocks if block.skip_reason is not None)


def parse_page(text: str, *, page: str) -> Page:
    """The examples of one page (``python`` and ``bash`` fences only).

    Raises:
        ValueError: an unclosed fence, a ``no-test`` comment before no example, or an
            unknown ``docs-test`` need.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    pending_skip: tuple[int, str] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        skip = _NO_TEST.match(line)
        if skip:
            pending_skip = (index + 1, skip["why"])
            index += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if line.strip() and pending_skip is not None:
                raise ValueError(f"{page}:{pending_skip[0]}: no-test comment before no example")
            index += 1
            continue
        close, body = _fence_body(lines, index, fence["fence"], page=page)
        language = fence["info"].lower()
        if language in RUN_LANGUAGES:
            why = pending_skip[1] if pending_skip is not None else None
            blocks.append(Block(page, index + 1, language, _dedent(body, fence["indent"]), why))
        elif pending_skip is not None:
            raise ValueError(f"{page}:{pending_skip[0]}: no-test comment before a {language!r}")
        pending_skip = None
        index = close + 1
    if pending_skip is not None:
        raise ValueError(f"{page}:{pending_skip[0]}: no-test comment before no example")
    needs = frozenset(
        need.strip() for found in _NEEDS.finditer(text) for need in found["needs"].split(",")
    )
    unknown = needs - KNOWN_NEEDS
    if unknown:
        raise ValueError(f"{page}: unknown docs-test need(s) {sorted(unknown)}")
    return Page(page, tuple(blocks), needs)


def _fence_body(lines: list[str], start: int, fence: str, *, page: str) -> tuple[int, list[str]]:
    for index in range(start + 1, len(lines)):
        stripped = lines[index].strip()
        if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
            return index, lines[start + 1 : index]
    raise ValueError(f"{page}:{start + 1}: unclosed code fence")


def _dedent(body: list[str], indent: str) -> str:
    return "\n".join(line[len(indent) :] if line.startswith(indent) else line for line in body)


def discover(docs_dir: Path) -> list[Page]:
    """Every page under ``docs_dir`` (sorted by path) with at least one example."""
    pages = []
    for path in sorted(docs_dir.rglob("*.md")):
        page = parse_page(path.read_text(), page=path.relative_to(docs_dir).as_posix())
        if page.blocks:
            pages.append(page)
    return pages


# -- the driver: one process per page -------------------------------------------------------


def run_page(
    page: Page, *, cwd: Path, env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run ``page``'s runnable blocks in order in a fresh interpreter whose working directory
    is ``cwd``; the result's return code is 0 when every block succeeded."""
    blocks = [
        {"where": block.where, "language": block.language, "code": block.code}
        for block in page.runnable
    ]
    return subprocess.run(
        [sys.executable, __file__],
        input=json.dumps(blocks),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _drive() -> int:
    """Run the blocks given as JSON on stdin; on the first failure print where and stop."""
    import traceback

    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in json.load(sys.stdin):
        print(f"--- {block['where']} ({block['language']})", flush=True)
        if block["language"] == "python":
            try:
                exec(compile(block["code"], block["where"], "exec"), namespace)  # noqa: S102
            except BaseException:
                traceback.print_exc()
                print(f"FAILED: the python example at {block['where']}", file=sys.stderr)
                return 1
        else:
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]], check=False)
            if done.returncode != 0:
                print(
                    f"FAILED: the bash example at {block['where']} exited {done.returncode}",
                    file=sys.stderr,
                )
                return 1
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_drive())
