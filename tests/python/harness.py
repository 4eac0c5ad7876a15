"""Start and stop the real `streamforge` binary for integration tests.

A `BrokerProcess` owns one broker child process: a free loopback port, a data dir that survives
restarts, and a log file that the fixtures print when a test fails. Processes are stopped by pid
only (SIGTERM, then SIGKILL after a bounded wait).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import wire

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
LOG_TAIL_LINES = 200


def find_binary() -> Path:
    """`$STREAMFORGE_BIN`, else `$CARGO_TARGET_DIR/debug/streamforge`, else `target/debug/streamforge`."""
    env = os.environ.get("STREAMFORGE_BIN")
    if env:
        return Path(env)
    target = os.environ.get("CARGO_TARGET_DIR")
    target_dir = Path(target) if target else REPO_ROOT / "target"
    if not target_dir.is_absolute():
        target_dir = REPO_ROOT / target_dir
    return target_dir / "debug" / "streamforge"


@functools.cache
def broker_help() -> str:
    """The `streamforge broker --help` text, used to adapt to flags that exist."""
    out = subprocess.run(
        [str(find_binary()), "broker", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return out.stdout + out.stderr


def has_flag(flag: str) -> bool:
    return flag in broker_help()


def free_port() -> int:
    """A loopback port that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    """One `streamforge broker` child process with a persistent data dir."""

    def __init__(
        self,
        work_dir: Path,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        http: bool = False,
        name: str = "broker",
    ):
        self.work_dir = Path(work_dir)
        self.data_dir = self.work_dir / f"{name}-data"
        self.log_path = self.work_dir / f"{name}.log"
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.host = "127.0.0.1"
        self.port = free_port()
        self.http_port: int | None = free_port() if http else None
        self.want_http = http
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._log_file = None

    # -- addresses -------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def http_url(self) -> str:
        assert self.http_port is not None, "broker started without http"
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        cmd = [
            str(find_binary()),
            "broker",
            "--listen",
            self.bootstrap,
            "--advertised-listener",
            self.bootstrap,
            "--data-dir",
            str(self.data_dir),
        ]
        if has_flag("--http-listen"):
            if self.want_http:
                cmd += ["--http-listen", f"127.0.0.1:{self.http_port}"]
            else:
                cmd += ["--http-listen", "off"]
        return cmd + self.extra_args

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, timeout_s: float = START_TIMEOUT_S) -> "BrokerProcess":
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        self._log_file.write(f"\n===== start #{self.starts + 1}: {' '.join(self.command())}\n".encode())
        self._log_file.flush()
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        env.setdefault("RUST_BACKTRACE", "1")
        env.update(self.env)
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.work_dir,
        )
        self.starts += 1
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until the broker answers an ApiVersions request (not merely accepts TCP)."""
        deadline = time.monotonic() + timeout_s
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode} during startup\n{self.log_tail()}"
                )
            try:
                with wire.connect(self.port, timeout_s=2.0, host=self.host) as sock:
                    resp = wire.api_versions(sock)
                    if resp.error_code == 0 and resp.api_keys:
                        return
                    last_err = RuntimeError(f"ApiVersions error {resp.error_code}")
            except OSError as e:
                last_err = e
            except wire.WireError as e:
                last_err = e
            time.sleep(0.1)
        raise TimeoutError(f"broker not ready after {timeout_s}s: {last_err}\n{self.log_tail()}")

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request_stop(self) -> None:
        """SIGTERM without waiting (a paused process is resumed first, or it would never see
        the signal); `stop` then waits for it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.request_stop()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._append_log(f"===== did not stop {timeout_s}s after SIGTERM: SIGKILL\n")
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)
        self._close_log()
        return self.proc.returncode

    def kill(self) -> int | None:
        """SIGKILL (simulated crash/power loss of the process)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        self._append_log("===== SIGKILLed by the test\n")
        self._close_log()
        return self.proc.returncode

    def restart(self, hard: bool = False) -> "BrokerProcess":
        """Stop (SIGKILL if `hard`, else SIGTERM) and start again on the same port and data dir."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    def wipe(self) -> None:
        assert not self.is_running()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- logs ------------------------------------------------------------------------------
    def _append_log(self, text: str) -> None:
        if self._log_file is not None and not self._log_file.closed:
            self._log_file.write(text.encode())
            self._log_file.flush()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        text = self.log_text().splitlines()
        return "\n".join(text[-lines:])
