#!/usr/bin/env python3
"""Runs the README's "Two commands" broker command and its client commands, so they cannot rot.

The commands are read from README.md (the indented lines of the "Two commands" section), not
copied here. Each runs as written except:
- `--release` is dropped from `cargo run` (CI has just built the debug binary; a release build
  of the workspace costs several minutes on CI's two cores, and the profile does not change
  which binary `cargo run` picks, which is what broke before: "could not determine which binary
  to run");
- the broker gets a free loopback port, a free dashboard port and a temporary data directory
  through its environment variables (STREAMFORGE_LISTEN, STREAMFORGE_HTTP_LISTEN,
  STREAMFORGE_DATA_DIR), and the client commands are pointed at that port (localhost:9092 is
  replaced; the CLI gets STREAMFORGE_BOOTSTRAP).
The `bench` line is skipped: it runs its own embedded broker and a million messages.

Exit status 0 when the broker started and every client command succeeded.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 600.0  # `cargo run` may have to link the binary first
COMMAND_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ") and line.strip()]


def without_release(cmd: str) -> str:
    return re.sub(r"^cargo run --release ", "cargo run ", cmd)


def run(cmd: str, env: dict[str, str]) -> str:
    print(f"--> {cmd}", flush=True)
    out = subprocess.run(
        cmd, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    sys.stdout.write(out.stdout[-2000:])
    if out.returncode != 0:
        raise SystemExit(f"FAILED ({out.returncode}): {cmd}\n{out.stderr[-4000:]}")
    return out.stdout


def wait_for_port(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"broker exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"broker did not listen within {START_TIMEOUT_S}s:\n{log.read_text()[-4000:]}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the broker's session (`cargo run` execs the broker), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> int:
    commands = readme_commands()
    broker_cmds = [c for c in commands if c.startswith("cargo run") and c.endswith("-- broker")]
    assert len(broker_cmds) == 1, f"README's broker command not found in {commands}"
    port, http_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="sf-readme-") as tmp:
        log = Path(tmp) / "broker.log"
        env = dict(os.environ)
        env.update(
            STREAMFORGE_LISTEN=f"127.0.0.1:{port}",
            STREAMFORGE_HTTP_LISTEN=f"127.0.0.1:{http_port}",
            STREAMFORGE_DATA_DIR=str(Path(tmp) / "data"),
            STREAMFORGE_BOOTSTRAP=f"127.0.0.1:{port}",
        )
        cmd = without_release(broker_cmds[0])
        print(f"--> {cmd}  (README: {broker_cmds[0]})", flush=True)
        with open(log, "wb") as log_file:
            # A session of its own: `cargo run` and the broker it starts are stopped together.
            proc = subprocess.Popen(
                shlex.split(cmd), cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        try:
            wait_for_port(port, proc, log)
            for c in commands:
                if c in broker_cmds or c.startswith("scripts/test") or " bench " in f"{c} ":
                    continue
                out = run(without_release(c).replace("localhost:9092", f"127.0.0.1:{port}"), env)
                if c.endswith("topics list") and "demo" not in out.split():
                    raise SystemExit(f"topic 'demo' (produced above) missing from `{c}`:\n{out}")
        finally:
            stop(proc)
        print(f"README commands OK (broker exit {proc.returncode})")
        return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
