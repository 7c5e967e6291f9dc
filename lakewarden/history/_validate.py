"""Replay's payload validation in a second process: the fold's thread only forwards texts.

A real table's ``inflight`` (``WorkloadProfile``) and ``completed`` (``CommitStats``)
payloads never repeat, so pydantic validates two texts an instant, and that validation
would be most of what replay spends beyond reading and decoding the topic if the fold did
it inline. Validation must still happen in the read (an invalid payload is a
rejection and changes the fold), but the fold only needs each verdict at the end: it folds
those payloads *optimistically* (``LeanEntry.payload_model`` is ``UNCHECKED``) and this
module checks them in a child process, on the machine's other core:

1. ``PayloadChecker.start()`` runs this file in a new interpreter (a fresh
   interpreter: no fork of a process that runs librdkafka's threads; its ~0.3 s start
   overlaps the read, because what the fold sends meanwhile is buffered, not waited for);
2. ``send`` forwards one consume batch's texts (a pickled pair of lists, length-prefixed),
   written to the pipe by a thread of the checker's own;
3. ``verdict`` writes the rest, closes the pipe and reads the answer: the invalid texts by
   where they were sent (transition, index), and the child's CPU time.

The child validates exactly as ``PayloadTexts.model`` does (``model_validate_json`` of the
transition's ``FAST_MODELS`` model) and remembers each text's verdict while texts repeat.
Any failure of the child (it cannot start, dies, answers late or garbled) is a verdict of
None: the caller then reads again with the payloads validated in process, so a broken
validator costs time, never a wrong fold.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from pydantic import BaseModel, ValidationError

_LENGTH: Final = struct.Struct("<Q")
# The transitions whose payloads are checked here, in the order ``send`` takes their texts.
CHECKED: Final = ("requested", "inflight", "completed")
_F_SETPIPE_SZ: Final = 1031  # Linux: a 1 MB pipe (the unprivileged maximum) means fewer writes
_PIPE_BYTES: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the child found: the texts that do not validate, as (transition, index in the
    order ``send`` forwarded that transition's texts), and the child's CPU seconds."""

    invalid: tuple[tuple[str, int], ...]
    texts: int
    cpu_s: float

    @property
    def all_valid(self) -> bool:
        return not self.invalid


class PayloadChecker:
    """The parent's side: forwards texts to the child and collects its verdict. ``send``
    and ``verdict`` from one thread; a writer thread of its own feeds the pipe (a batch's
    texts are a few MB, more than a pipe holds: written from the fold's thread they would
    wait for the next batch, and the child would idle meanwhile). ``close`` (or
    ``verdict``) ends the child."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        stdin = process.stdin
        assert stdin is not None  # noqa: S101 - started with stdin=PIPE
        self._fd = stdin.fileno()
        self._frames: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._failed = False
        self._writer = threading.Thread(target=self._write, name="payload-checker", daemon=True)
        self._writer.start()

    @classmethod
    def start(cls) -> PayloadChecker | None:
        """A checker with its child started, or None when no process can be started."""
        root = str(Path(__file__).resolve().parents[2])  # where ``lakewarden`` is importable
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            # This file as a script (-P: its directory not on sys.path), so the child
            # imports the payload models, not the whole history package.
            process = subprocess.Popen(
                [sys.executable, "-P", __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
        except OSError:
            return None
        try:
            fcntl.fcntl(process.stdin.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)  # type: ignore[union-attr]
        except OSError:
            pass  # the default pipe size only means more writes
        return cls(process)

    def send(self, *texts: list[str]) -> None:
        """Forward one batch's texts: a list per transition of ``CHECKED``, each in the
        order its entries were made."""
        if self._failed or not any(texts):
            return
        self._frames.put(frame(*texts))

    def _write(self) -> None:
        """The writer thread: each frame written whole (``os.write`` lets go of the GIL
        while the pipe is full); a child that is gone fails the checker."""
        while True:
            frame = self._frames.get()
            if frame is None:
                return
            if self._failed:
                continue  # drain: the child is gone
            view = memoryview(frame)
            try:
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError:
                self._failed = True

    def verdict(self, timeout_s: float = 120.0) -> Verdict | None:
        """Every text sent so far judged: end the input, wait for the answer; None when
        the child failed (then nothing can be said of any text)."""
        try:
            self._frames.put(None)
            self._writer.join(timeout_s)
            if self._failed or self._writer.is_alive():
                return None
            out, _ = self._process.communicate(timeout=timeout_s)  # closes its input
            if self._process.returncode != 0:
                return None
            invalid, texts, cpu_s = pickle.loads(out)  # noqa: S301 - our own child's answer
            return Verdict(tuple(invalid), texts, cpu_s)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError, subprocess.SubprocessError):
            return None
        finally:
            self.close()

    def close(self) -> None:
        """End the child if it still runs (a read that failed half way)."""
        self._frames.put(None)
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        # The writer stops before the pipe is closed: a write to a closed descriptor could
        # reach whatever file reused its number. (A dead child fails its writes at once.)
        self._writer.join()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


def frame(*texts: list[str]) -> bytes:
    """One batch's texts as the child reads them (a list per transition of ``CHECKED``):
    a length, then the pickled lists.

    Raises: ValueError (not a list per transition)."""
    if len(texts) != len(CHECKED):
        raise ValueError(f"a frame holds a list of texts per {CHECKED}, not {len(texts)} lists")
    body = pickle.dumps(texts, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


# How ``TimelinePublisher`` writes the ``requested`` payload of an ingestion that is not
# cancellable (``json.dumps(..., sort_keys=True)`` of the model's dump): it begins so, and
# after the operation its plan is none or a job plan (whose first key is ``batch``).
PLAIN_REQUESTED: Final = '{"cancellable": false, "operation": "'
_OPERATION_AT: Final = len(PLAIN_REQUESTED)
_THEN_PLAN: Final = '", "plan": '
_NO_PLAN: Final = "null}"
_JOB_PLAN: Final = '{"batch": '


def plain_ingestion(text: str) -> bool:
    """Whether a ``requested`` text is laid out as lakewarden publishes an ingestion's that is
    not cancellable (``PLAIN_REQUESTED``, then no plan or a job plan): the fast ``requested``
    step of an optimistic fold takes such a text without reading it, and this process fails
    the read unless its payload is one that step takes (``fast_requested``). A look at the
    layout, not a proof (a key given twice, say, is read as the model reads it, by the
    check): a text that looks so and is not fast costs a second read, never a wrong fold.
    The plans of table services (service, clean, rollback) do not look so, so a table's
    cleaner and compactions are read as any other text."""
    if not text.startswith(PLAIN_REQUESTED):
        return False
    end = text.find(_THEN_PLAN, _OPERATION_AT)
    if end <= _OPERATION_AT:  # none, or an empty operation
        return False
    plan_at = end + len(_THEN_PLAN)
    return text.startswith(_NO_PLAN, plan_at) or text.startswith(_JOB_PLAN, plan_at)


# The kinds of plan an ingestion's ``requested`` payload may hold on the fast path (besides
# none): a job plan, or a legacy untyped one (``JobPlan``, ``UntypedPlan``).
_FAST_PLAN_KINDS: Final = ("job", "untyped")


def fast_requested(payload: Any) -> bool:
    """Whether the fast ``requested`` step takes a valid ``RequestedPayload``: not
    cancellable, its plan none, a job plan or a legacy untyped plan (the discriminator's
    ``kind``). The one statement of the rule: the fold's thread applies it to the payloads it
    validates, this process to the texts the fold took unread (``plain_ingestion``)."""
    if payload.cancellable is not False:
        return False
    plan = payload.plan
    return plan is None or getattr(plan, "kind", None) in _FAST_PLAN_KINDS


def _models() -> dict[str, type[BaseModel]]:
    """The model of each transition in ``CHECKED`` (``FAST_MODELS``'s; imported here, so
    the child imports only the payload models)."""
    from lakewarden.table.stats import CommitStats, WorkloadProfile
    from lakewarden.table.timeline_state import RequestedPayload

    return dict(zip(CHECKED, (RequestedPayload, WorkloadProfile, CommitStats), strict=True))


# The child remembers this many verdicts per transition while texts repeat; after that many
# texts without a hit it stops looking texts up for ``_PAUSE`` texts (texts that never
# repeat would each cost a hash and a dict insert), then tries again.
_REMEMBERED: Final = 4096
_PAUSE: Final = 16 * _REMEMBERED


class _Judge:
    """The verdicts on one transition's texts, in the order they were sent: pydantic's
    (``model_validate_json``). A ``requested`` text laid out as a plain ingestion's
    (``plain_ingestion``) may have been taken by the fold's fast step unread: unless its
    payload is one that step takes (``fast_requested``), it counts as invalid (the read then
    starts over in process)."""

    def __init__(self, name: str, model: type[BaseModel], *, requested: bool = False) -> None:
        self.name = name
        # What ``model_validate_json`` calls, without its Python frame (the same verdict).
        self._validate = model.__pydantic_validator__.validate_json
        self._requested = requested
        self._seen: dict[str, bool] = {}
        self._hits = 0
        self._paused = 0  # texts left to judge without looking them up
        self.judged = 0

    def judge(self, texts: list[str], invalid: list[tuple[str, int]]) -> None:
        """Append (name, index) to ``invalid`` for each text of ``texts`` that does not
        validate."""
        seen, index, valid_as = self._seen, self.judged, self._valid
        for text in texts:
            valid = None if self._paused else seen.get(text)
            if valid is None:
                valid = valid_as(text)
                self._remember(text, valid)
            else:
                self._hits += 1
            if not valid:
                invalid.append((self.name, index))
            index += 1
        self.judged = index

    def _valid(self, text: str) -> bool:
        try:
            payload = self._validate(text)
        except ValidationError:
            return False
        if self._requested and plain_ingestion(text):
            return fast_requested(payload)
        return True

    def _remember(self, text: str, valid: bool) -> None:
        if self._paused:
            self._paused -= 1
            return
        seen = self._seen
        if len(seen) >= _REMEMBERED:
            seen.clear()
            if not self._hits:  # a whole cache's worth of texts, none repeated
                self._paused = _PAUSE
            self._hits = 0
        seen[text] = valid


def _judges() -> list[_Judge]:
    """A judge per transition of ``CHECKED``."""
    return [_Judge(n, m, requested=n == "requested") for n, m in _models().items()]


def serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """The child: validate every text of every batch read from ``source``; at its end write
    (invalid, texts, cpu_s) to ``sink``."""
    judges = _judges()
    invalid: list[tuple[str, int]] = []
    while True:
        head = source.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            break
        batch = pickle.loads(source.read(_LENGTH.unpack(head)[0]))  # noqa: S301 - our parent's
        for judge, texts in zip(judges, batch, strict=True):
            judge.judge(texts, invalid)
    texts = sum(judge.judged for judge in judges)
    sink.write(pickle.dumps((invalid, texts, time.process_time())))
    sink.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)


__all__ = [
    "CHECKED",
    "PayloadChecker",
    "Verdict",
    "PLAIN_REQUESTED",
    "fast_requested",
    "frame",
    "plain_ingestion",
    "serve",
]
