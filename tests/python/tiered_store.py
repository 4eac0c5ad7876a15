"""Object stores for the tiered-storage tests.

- `MotoStore`: a real S3-compatible server (`moto_server` from PyPI) started on a free loopback
  port, reached by the broker through a small TCP proxy so a test can make the store
  unreachable and bring it back without losing its contents (moto keeps data in memory).
- `LocalStore`: the local-directory store (`--remote-storage file:///...`); unavailable = the
  directory replaced by a plain file.
Both offer the same methods, so the same tests run against each.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness import free_port

BUCKET = "streamforge-cold"
MOTO_START_TIMEOUT_S = 30.0
PROXY_CONNECTIONS_MAX = 256


def moto_server_bin() -> str:
    """`moto_server` next to this interpreter (the CI venv), else on PATH."""
    beside = Path(sys.executable).parent / "moto_server"
    if beside.exists():
        return str(beside)
    found = shutil.which("moto_server")
    if not found:
        raise RuntimeError("moto_server not found: pip install -r tests/python/requirements.txt")
    return found


class TcpProxy:
    """Forwards 127.0.0.1:port -> 127.0.0.1:target; `down()` refuses and cuts connections."""

    def __init__(self, target: int):
        self.target = target
        self.port = free_port()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.up()

    def up(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("127.0.0.1", self.port))
            ls.listen(64)
            self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            ls, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if ls is not None:
            try:
                ls.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            ls.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not ls or len(self._conns) >= PROXY_CONNECTIONS_MAX * 2:
                    client.close()
                    upstream.close()
                    continue
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            with self._lock:
                # Both directions end here; forget the pair once (the other side may run too).
                self._conns = [c for c in self._conns if c is not src and c is not dst]


class MotoStore:
    kind = "s3"

    def __init__(self, work_dir: Path):
        import boto3  # installed with moto[server]

        self.port = free_port()
        self.log = open(work_dir / "moto.log", "ab")
        self.proc = subprocess.Popen(
            [moto_server_bin(), "-H", "127.0.0.1", "-p", str(self.port)],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + MOTO_START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("moto_server did not start")
                time.sleep(0.1)
        self.proxy = TcpProxy(self.port)
        self.s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{self.port}",
            aws_access_key_id="test",
            aws_secret_access_key="test",
            region_name="us-east-1",
        )
        self.s3.create_bucket(Bucket=BUCKET)

    def broker_args(self) -> list[str]:
        return [
            "--s3-endpoint",
            f"http://127.0.0.1:{self.proxy.port}",
            "--s3-bucket",
            BUCKET,
            "--s3-region",
            "us-east-1",
        ]

    def broker_env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}

    def keys(self) -> list[str]:
        out: list[str] = []
        token = None
        for _ in range(1000):
            kw = {"Bucket": BUCKET}
            if token:
                kw["ContinuationToken"] = token
            r = self.s3.list_objects_v2(**kw)
            out += [o["Key"] for o in r.get("Contents", [])]
            if not r.get("IsTruncated"):
                return sorted(out)
            token = r["NextContinuationToken"]
        raise RuntimeError("listing did not end")

    def get(self, key: str) -> bytes:
        return self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=data)

    def set_available(self, up: bool) -> None:
        if up:
            self.proxy.up()
        else:
            self.proxy.down()

    def close(self) -> None:
        self.proxy.down()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


class LocalStore:
    kind = "local"

    def __init__(self, work_dir: Path):
        self.root = work_dir / "remote-store"
        self.root.mkdir(parents=True)

    def broker_args(self) -> list[str]:
        return ["--remote-storage", self.root.as_uri()]

    def broker_env(self) -> dict[str, str]:
        return {}

    def _dir(self) -> Path:
        """Where the objects are (also while the store is made unavailable)."""
        return self.root if self.root.is_dir() else self.root.with_name("remote-store.aside")

    def keys(self) -> list[str]:
        root = self._dir()
        if not root.is_dir():
            return []
        out = []
        for dirpath, _, files in os.walk(root):
            for f in files:
                if "#" in f:  # the store's in-progress temporary files
                    continue
                out.append(str(Path(dirpath, f).relative_to(root)))
        return sorted(out)

    def get(self, key: str) -> bytes:
        return (self._dir() / key).read_bytes()

    def put(self, key: str, data: bytes) -> None:
        (self._dir() / key).write_bytes(data)

    def set_available(self, up: bool) -> None:
        aside = self.root.with_name("remote-store.aside")
        if up:
            self.root.unlink()
            aside.rename(self.root)
        else:
            self.root.rename(aside)
            self.root.write_bytes(b"store unavailable")

    def close(self) -> None:
        if self.root.is_file():
            self.set_available(True)
        shutil.rmtree(self.root, ignore_errors=True)
