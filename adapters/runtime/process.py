"""The shared lifecycle of every server engine: a child process in its own process group.

:class:`ServerProcess` starts the server with ``start_new_session=True`` (so the whole tree -
vLLM's engine-core workers, uvicorn workers - shares one process group), sends stdout+stderr
to a log file, polls ``GET /health`` (then ``/v1/models``) until one answers 200, and on exit
sends SIGTERM to the group, waits a grace period and SIGKILLs whatever is left. Used as a
context manager, success, error, timeout and KeyboardInterrupt all stop it, and nothing of
the group survives: ``stop()`` waits until no live process remains in the group.

Nothing outlives the harness either, whatever kills it (SIGKILL, the OOM killer): ``start()``
starts a watchdog beside each group (:mod:`adapters.runtime.watchdog`: a child of the harness in its
own session that stops the group once the harness is gone) and records the group in the
registry of live groups (:mod:`adapters.runtime.leftovers`), from which a later ``bench`` removes the
groups of a dead run when the watchdog died too. ``stop()`` ends both.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any, Mapping, Sequence

import psutil

from adapters.runtime import leftovers
from adapters.base import EngineError

LOG_TAIL_LINES = 40
WATCHDOG = Path(__file__).with_name("watchdog.py")
HEALTH_POLL_MAX_S = 0.25  # the start-up health poll backs off from 50 ms to this: a server is seen ready within it
_record_warned: set[Path] = set()  # state dirs already warned about (one line per process)


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (bind to port 0, read it, close).

    There is a short window before the server binds it; servers bind 127.0.0.1 only.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port``: a bind with ``SO_REUSEADDR`` (what servers
    such as uvicorn use) succeeds. Connections left in TIME_WAIT do not count as taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def tail_file(path: Path, n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` lines of a text file ("" when it does not exist)."""
    try:
        with Path(path).open("r", errors="replace") as fh:
            return "".join(deque(fh, maxlen=n))
    except OSError:
        return ""


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return out


def watch_group(pgid: int, grace_s: float, log: Any = subprocess.DEVNULL, record: Path | None = None) -> subprocess.Popen:
    """Start :mod:`adapters.runtime.watchdog` for process group ``pgid``: a child of this process in a
    session of its own that thaws, SIGTERMs and (after ``grace_s`` s) SIGKILLs the group once this
    process is gone, whatever killed it, and exits by itself when the group is empty. ``log``
    receives what it does; ``record``: the group's registry record it removes. Raises OSError
    when it cannot be started. Used for engine servers and for the harness's own helper servers
    (the calibration's null server)."""
    leader_start = leftovers.start_ticks(pgid) or 0
    argv = [sys.executable, "-I", str(WATCHDOG), str(os.getpid()), str(pgid), str(leader_start), f"{grace_s:g}"]
    if record is not None:
        argv.append(str(record))
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


class ServerProcess:
    """One engine server as a child process in its own process group.

    ``cmd``: argv; ``env``: the complete environment for the child; ``log_path``: receives
    stdout+stderr (appended); ``port``: where it serves on 127.0.0.1; ``health_paths``: tried in
    order, 200 from any = ready; ``startup_timeout_s``: health wait limit (s);
    ``stop_grace_s``: SIGTERM → SIGKILL delay (s); ``name``: used in error messages.

    ``cancel``: when set while waiting for health, start-up stops with :class:`EngineError`
    (another thread's Ctrl-C during a parallel start). :meth:`pause` / :meth:`resume` freeze and
    thaw the whole group (SIGSTOP / SIGCONT) so an idle server takes no CPU while another
    engine is measured.

    ``__enter__`` starts and waits for health, then records ``startup_s`` (s) and
    ``processes`` (live processes in the group at that moment: the server plus its workers, a
    recorded operational fact the scorer's complexity criterion uses); it raises
    :class:`EngineError` (message + the last 40 log lines in ``log_tail``) when the process
    exits early or health times out, after stopping it. ``__exit__`` always stops the group;
    when the server had died on its own during the with-block (a crash mid-run) and no other
    exception is in flight, it raises
    :class:`EngineError` so a crash is never a silent wrong number.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        log_path: Path,
        port: int,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        host: str = "127.0.0.1",
        health_paths: Sequence[str] = ("/health", "/v1/models"),
        startup_timeout_s: float = 300.0,
        stop_grace_s: float = 10.0,
        name: str = "server",
        health_headers: Mapping[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.cmd = [str(c) for c in cmd]
        self.log_path = Path(log_path)
        self.port = port
        self.env = dict(env) if env is not None else dict(os.environ)
        self.cwd = cwd
        self.host = host
        self.health_paths = tuple(health_paths)
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.name = name
        self.health_headers = dict(health_headers or {})
        self.cancel = cancel
        self.paused = False
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self.watchdog: subprocess.Popen | None = None  # adapters/runtime/watchdog.py for this group
        self.record_path: Path | None = None  # this group's record in the live-group registry
        self._stopping = False
        self.startup_s: float | None = None
        self.processes: int | None = None  # live processes in the group once healthy (a measured fact)

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing ``/v1``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The child's pid (None before :meth:`start`)."""
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        """Spawn the child in a new session/process group, output appended to the log file; then
        its watchdog and its registry record (:meth:`_guard`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(self.cmd)}\n".encode())
            log.flush()
            try:
                self.proc = subprocess.Popen(
                    self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=self.env, cwd=self.cwd, start_new_session=True,
                )
            except OSError as exc:
                raise EngineError(f"{self.name}: could not start {self.cmd[0]!r}: {exc}") from exc
        self.pgid = self.proc.pid  # start_new_session: the child leads its own group
        self._guard()

    def _guard(self) -> None:
        """Start the group's watchdog, then write its registry record (Linux: both read /proc).

        The watchdog is a child of this process (its parent pid is what it watches) in a session
        of its own, and appends what it does to the engine's log. A state dir that cannot be
        written costs only the record: one line on stderr, and the engine still starts.
        """
        if self.pgid is None or not os.path.isdir("/proc/self"):
            return
        record = leftovers.record_path(os.getpid(), self.pgid)
        with self.log_path.open("ab") as log:
            try:
                self.watchdog = watch_group(self.pgid, self.stop_grace_s, log, record)
            except OSError as exc:  # pragma: no cover - the interpreter that runs us can always start
                log.write(f"bench: could not start the engine's watchdog: {exc}\n".encode())
        rec = leftovers.new_record(self.name, self.pgid, self.cmd, self.log_path,
                                   watchdog_pid=self.watchdog.pid if self.watchdog else None)
        try:
            self.record_path = leftovers.write_record(rec, record.parent)
        except OSError as exc:
            if record.parent not in _record_warned:
                _record_warned.add(record.parent)
                print(f"warning: cannot record engine groups in {record.parent} ({exc.strerror or exc}): "
                      f"a later bench cannot clean up after this one if it is killed; set "
                      f"{leftovers.STATE_ENV} to a writable folder", file=sys.stderr)

    def _end_guard(self) -> None:
        """After the group is gone: end its watchdog (reaped) and remove its registry record."""
        wd, self.watchdog = self.watchdog, None
        if wd is not None:
            if wd.poll() is None:
                wd.kill()
            try:
                wd.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                pass
        leftovers.remove_record(self.record_path)
        self.record_path = None

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        """The last ``n`` lines of the server log."""
        return tail_file(self.log_path, n)

    def poll(self) -> int | None:
        """The child's exit code, or None while it runs."""
        return self.proc.poll() if self.proc else None

    def _healthy(self) -> bool:
        for path in self.health_paths:
            req = urllib.request.Request(self.base_url + path, headers=self.health_headers)
            try:
                with urllib.request.urlopen(req, timeout=2.0) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError, ValueError):
                continue
        return False

    def wait_healthy(self, clock=time.monotonic, sleep=time.sleep) -> float:
        """Poll health until 200; return the start-up time in seconds.

        Raises :class:`EngineError` when the process exits first or ``startup_timeout_s`` passes.
        """
        assert self.proc is not None, "start() first"
        t0 = clock()
        delay = 0.05
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise EngineError(
                    f"{self.name} exited with code {rc} during start-up (log: {self.log_path})", self.log_tail()
                )
            if self.cancel is not None and self.cancel.is_set():
                self.stop_grace_s = min(self.stop_grace_s, 2.0)  # nothing to save in a half-started server
                raise EngineError(f"{self.name}: start-up cancelled", self.log_tail())
            if self._healthy():
                return clock() - t0
            if clock() - t0 > self.startup_timeout_s:
                raise EngineError(
                    f"{self.name} was not healthy after {self.startup_timeout_s:.0f} s "
                    f"(GET {' or '.join(self.health_paths)} on {self.base_url}); raise the start-up timeout "
                    f"or read the log: {self.log_path}",
                    self.log_tail(),
                )
            sleep(delay)
            delay = min(delay * 1.5, HEALTH_POLL_MAX_S)

    def stop(self) -> int | None:
        """SIGTERM the whole group, wait ``stop_grace_s``, SIGKILL what is left; reap.

        Returns the child's exit code. Safe to call twice. Waits (up to 5 s after SIGKILL)
        until no live process of the group remains, then ends the group's watchdog and removes
        its registry record.
        """
        if self.proc is None or self.pgid is None:
            return None
        try:
            return self._stop()
        except KeyboardInterrupt:  # a second Ctrl-C: no more grace, but never leave the group behind
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            raise
        finally:
            self._end_guard()

    def _stop(self) -> int | None:
        assert self.proc is not None and self.pgid is not None
        self._stopping = True
        try:
            if self.paused:  # a stopped group would only see SIGTERM once continued
                os.killpg(self.pgid, signal.SIGCONT)
                self.paused = False
            os.killpg(self.pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + self.stop_grace_s
        while time.monotonic() < deadline:
            self.proc.poll()
            if self.proc.returncode is not None and not group_members(self.pgid):
                break
            time.sleep(0.05)
        else:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass
        end = time.monotonic() + 5
        while group_members(self.pgid) and time.monotonic() < end:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        return self.proc.returncode

    def pause(self) -> None:
        """Freeze every process of the group (SIGSTOP): no CPU until :meth:`resume`."""
        if self.pgid is not None and not self.paused:
            try:
                os.killpg(self.pgid, signal.SIGSTOP)
            except ProcessLookupError:
                return
            self.paused = True

    def resume(self) -> None:
        """Thaw the group (SIGCONT) and wait until it answers health again.

        Raises :class:`EngineError` when it died while paused or does not answer in time.
        """
        if self.pgid is None or self.proc is None:
            return
        rc = self.proc.poll()
        if rc is not None:
            raise EngineError(f"{self.name} exited with code {rc} while it waited for its turn (log: {self.log_path})",
                              self.log_tail())
        if self.paused:
            try:
                os.killpg(self.pgid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.paused = False
        self.wait_healthy()

    def check_alive(self) -> None:
        """Raise :class:`EngineError` (with the log tail) when the server has exited."""
        rc = self.poll()
        if rc is not None and not self._stopping:
            raise EngineError(f"{self.name} exited unexpectedly with code {rc} (log: {self.log_path})", self.log_tail())

    # -- context manager --------------------------------------------------------------------
    def __enter__(self) -> "ServerProcess":
        self.start()
        try:
            self.startup_s = self.wait_healthy()
            self.processes = len(group_members(self.pgid)) if self.pgid is not None else None
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        crashed = self.proc is not None and self.proc.poll() is not None
        rc = self.stop()
        if crashed and exc_type is None:
            raise EngineError(
                f"{self.name} exited with code {rc} during the run (crashed mid-run; log: {self.log_path})",
                self.log_tail(),
            )


def run_guarded(cmd: list[str], env: Mapping[str, str], log_path: Path, cancel: threading.Event | None,
                timeout_s: float, *, what: str, cwd: Path | None = None) -> int:
    """Run ``cmd`` (an offline step: a model conversion or export) in a new process group under a
    watchdog, its output appended to ``log_path``; the group is stopped on any way out. Returns its
    exit code. Raises :class:`EngineError` (``what`` names the step, e.g. "llamacpp: the GGUF
    conversion") when it cannot start, is cancelled through ``cancel`` or runs past ``timeout_s`` s."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env),
                                    cwd=cwd, start_new_session=True)
        except OSError as exc:
            raise EngineError(f"{what} could not start ({cmd[0]!r}): {exc}") from exc
        watchdog = watch_group(proc.pid, 5.0, log)
    deadline = time.monotonic() + timeout_s
    try:
        while proc.poll() is None:
            if cancel is not None and cancel.is_set():
                raise EngineError(f"{what} was cancelled", tail_file(log_path))
            if time.monotonic() > deadline:
                raise EngineError(f"{what} took over {timeout_s:.0f} s (log: {log_path})", tail_file(log_path))
            time.sleep(0.2)
        return proc.returncode
    finally:
        try:
            if proc.poll() is None or group_members(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)  # what is left of the group (nothing after a clean exit)
        except ProcessLookupError:
            pass
        proc.wait()
        watchdog.kill()
        watchdog.wait()
