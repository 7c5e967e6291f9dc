"""Background processes owned through pid files: spawn, probe, wait for, stop.

Every process the dev stack or a test fixture starts goes through :func:`spawn`, which

- starts it in a new session, so its pid is also its process-group id and :func:`stop` can
  signal the whole group (the JVM's and weed's helper threads/children go with it);
- sends stdout and stderr to a log file and stdin to ``/dev/null``;
- writes its pid file atomically (temporary file + rename), so a reader never sees half a pid.

``os.posix_spawn`` is used rather than ``subprocess.Popen`` on purpose: a ``Popen`` object that
is garbage-collected while its child still runs emits a ``ResourceWarning``, which pytest (with
warnings as errors) turns into failures, and background servers outlive the object by design.
A parent that spawned a child reaps it in :func:`pid_alive`, so no zombie is ever reported alive.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lakewarden.devstack.errors import DevStackError

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def spawn(
    argv: Sequence[str],
    *,
    log_file: Path,
    pid_file: Path,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start ``argv`` in the background in its own session and record its pid.

    ``argv[0]`` is looked up on ``PATH`` when it is not a path. The log file is appended to.

    Raises:
        DevStackError: the executable does not exist or cannot be started.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    file_actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log_file), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    try:
        pid = os.posix_spawnp(
            argv[0],
            list(argv),
            dict(os.environ if env is None else env),
            file_actions=file_actions,
            setsid=True,
        )
    except OSError as err:
        raise DevStackError(f"cannot start {argv[0]!r}: {err}") from err
    write_pid_file(pid_file, pid)
    log.debug("spawned", extra={"pid": pid, "argv": " ".join(argv), "log": str(log_file)})
    return pid


def write_pid_file(pid_file: Path, pid: int) -> None:
    """Write ``pid`` to ``pid_file`` atomically (a reader sees the old file or the new one)."""
    tmp = pid_file.with_name(f".{pid_file.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{pid}\n")
    tmp.replace(pid_file)


def read_pid_file(pid_file: Path) -> int | None:
    """The pid in ``pid_file``, or None when the file is missing or does not hold a number."""
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22).

    Together with the pid it identifies a process across pid reuse. None when it is gone.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs. Reaps it first if it is our exited child, so zombies are dead."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass  # not our child: the CLI that started it has exited, or another process did.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def stop(pid: int, *, timeout_s: float = 15.0, name: str = "process") -> None:
    """Stop the process group led by ``pid``: SIGTERM, then SIGKILL after ``timeout_s``.

    Returns once the leader and every other member of its group are gone. A pid that is
    already gone is not an error.

    Raises:
        DevStackError: a member survived SIGKILL (it should not; permissions, D state).
    """
    if not pid_alive(pid) and not group_members(pid):
        return
    _signal_group(pid, signal.SIGTERM)
    how = "SIGTERM"
    if not wait_for(lambda: not pid_alive(pid), timeout_s=timeout_s):
        log.warning("did not stop in time, killing", extra={"part": name, "pid": pid})
        how = "SIGKILL"
        _signal_group(pid, signal.SIGKILL)
    # Members the leader left behind (forked helpers) must not outlive it.
    if not wait_for(lambda: not group_members(pid), timeout_s=2.0):
        how = "SIGKILL"
        _signal_group(pid, signal.SIGKILL)
    if not wait_for(lambda: not pid_alive(pid) and not group_members(pid), timeout_s=5.0):
        raise DevStackError(f"{name} (pid {pid}) or its process group survived SIGKILL")
    log.info("stopped", extra={"part": name, "pid": pid, "signal": how})


def group_members(pgid: int) -> set[int]:
    """The pids of live (non-zombie) processes in process group ``pgid``."""
    members = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.add(int(entry.name))
    return members


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # The pid leads its own group (spawned with setsid); fall back to the pid alone if the
    # group is gone or was never ours.
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_for(check: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.1) -> bool:
    """Poll ``check`` until it returns True (then True) or ``timeout_s`` passes (then False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


# Where listening ports are drawn from: below the kernel's ephemeral range. A port the OS hands
# out for ``bind(0)`` is an ephemeral one, and so is the local port of every outgoing connection;
# a broker that binds its second listener seconds after its ports were picked (KRaft brings the
# broker listener up only once the quorum forms) can then find a client socket sitting on it.
_LISTEN_PORT_FLOOR = 20000
_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_floor() -> int:
    """The first port of the kernel's ephemeral range (32768 where Linux does not say)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(_EPHEMERAL_RANGE_FILE.read_text().split()[0])
    return 32768


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on ``host`` right now, drawn at random from below the ephemeral
    range so that no outgoing connection can take it before the caller binds it.

    Another process may still pick the same port first; starters detect that as a failed start
    and say so, with the log.
    """
    ceiling = _ephemeral_floor()
    if ceiling - _LISTEN_PORT_FLOOR >= 1000:
        for _ in range(100):
            port = _LISTEN_PORT_FLOOR + secrets.randbelow(ceiling - _LISTEN_PORT_FLOOR)
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_answers(port: int, *, host: str = LOOPBACK, timeout_s: float = 0.5) -> bool:
    """True when a TCP connection to ``host:port`` is accepted."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def log_tail(log_file: Path, *, lines: int = 25) -> str:
    """The last ``lines`` lines of ``log_file`` (for error messages), or a note if it is absent."""
    try:
        text = log_file.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {log_file})"
    return "\n".join(text.splitlines()[-lines:])


def wait_ready(
    name: str,
    pid: int,
    ready: Callable[[], bool],
    *,
    timeout_s: float,
    log_file: Path,
    interval_s: float = 0.1,
) -> float:
    """Wait until ``ready()`` is True while process ``pid`` runs; return the seconds waited.

    Raises:
        DevStackError: the process exited first, or ``timeout_s`` passed; the message carries
            the tail of ``log_file``.
    """
    started = time.monotonic()
    died = False

    def check() -> bool:
        nonlocal died
        if not pid_alive(pid):
            died = True
            return True
        return ready()

    ok = wait_for(check, timeout_s=timeout_s, interval_s=interval_s)
    if died:
        raise DevStackError(
            f"{name} (pid {pid}) exited during start-up. Last lines of {log_file}:\n"
            f"{log_tail(log_file)}"
        )
    if not ok:
        raise DevStackError(
            f"{name} (pid {pid}) did not become ready within {timeout_s:.0f} s. "
            f"Last lines of {log_file}:\n{log_tail(log_file)}"
        )
    return time.monotonic() - started
