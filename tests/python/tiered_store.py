"""Object stores for the tiered-storage tests.

- `MotoStore`: a real S3-compatible server (`moto_server` from PyPI) started on a free loopback
  port, reached by the broker through a small TCP proxy so a test can make the store
  unreachable and bring it back without losing its contents (moto keeps data in memory).
- `SeaweedStore`: SeaweedFS (`weed server`: master, volume server, filer and S3 gateway in one
  process, data in a temp dir, every port a free loopback one), built from the Go module proxy
  by scripts/setup; reached through the same kind of proxy. A real object store on disk.
- `LocalStore`: the local-directory store (`--remote-storage file:///...`); unavailable = the
  directory replaced by a plain file.
Both offer the same methods, so the same tests run against each.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness import REPO_ROOT, free_port

BUCKET = "streamforge-cold"
MOTO_START_TIMEOUT_S = 30.0
SEAWEED_START_TIMEOUT_S = 90.0
# weed does not finish its graceful stop in 20 s; its data dir is thrown away, so SIGKILL soon.
SEAWEED_STOP_TIMEOUT_S = 3.0
PROXY_CONNECTIONS_MAX = 256
# The SeaweedFS version scripts/setup builds (one line, a Go module version).
SEAWEEDFS_VERSION_FILE = REPO_ROOT / "tests" / "python" / "seaweedfs.version"
SEAWEED_ACCESS_KEY = "streamforge"
SEAWEED_SECRET_KEY = "streamforge-secret"


def moto_server_bin() -> str:
    """`moto_server` next to this interpreter (the CI venv), else on PATH."""
    beside = Path(sys.executable).parent / "moto_server"
    if beside.exists():
        return str(beside)
    found = shutil.which("moto_server")
    if not found:
        raise RuntimeError("moto_server not found: pip install -r tests/python/requirements.txt")
    return found


def weed_bin() -> str:
    """`$SEAWEEDFS_BIN`, else the binary scripts/setup builds into the user's cache dir."""
    env = os.environ.get("SEAWEEDFS_BIN")
    if env:
        path = Path(env)
    else:
        version = SEAWEEDFS_VERSION_FILE.read_text().strip()
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        path = cache / "streamforge" / f"seaweedfs-{version}" / "weed"
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"SeaweedFS binary not found at {path}: run scripts/setup (it builds `weed`)")
    return str(path)


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


class S3Store:
    """What both S3-compatible servers share: a child process `proc` on loopback port `port`,
    the broker reaching it through `proxy`, boto3 for the test's own look at the bucket."""

    kind = "s3"
    access_key = "test"
    secret_key = "test"
    stop_timeout_s = 10.0

    def _connect(self, work_dir: Path) -> None:
        import boto3  # installed with moto[server]

        self.proxy = TcpProxy(self.port)
        self.s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{self.port}",
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
        )

    def _wait_port(self, timeout_s: float, name: str) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} did not start")
                time.sleep(0.1)

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
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

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

    def _stop(self) -> None:
        """SIGTERM by pid, SIGKILL after a bounded wait."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()

    def close(self) -> None:
        if getattr(self, "proxy", None) is not None:
            self.proxy.down()
        self._stop()


class MotoStore(S3Store):
    def __init__(self, work_dir: Path):
        self.port = free_port()
        self.log = open(work_dir / "moto.log", "ab")
        self.proc = subprocess.Popen(
            [moto_server_bin(), "-H", "127.0.0.1", "-p", str(self.port)],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_port(MOTO_START_TIMEOUT_S, "moto_server")
            self._connect(work_dir)
            self.s3.create_bucket(Bucket=BUCKET)
        except BaseException:
            self.close()
            raise


class SeaweedStore(S3Store):
    """`weed server` with only what an S3 gateway needs (master, one volume server, filer, S3),
    all on 127.0.0.1, every port (and gRPC port) chosen free, telemetry off, data in work_dir."""

    kind = "seaweedfs"
    access_key = SEAWEED_ACCESS_KEY
    secret_key = SEAWEED_SECRET_KEY
    stop_timeout_s = SEAWEED_STOP_TIMEOUT_S

    def __init__(self, work_dir: Path):
        binary = weed_bin()
        data = work_dir / "seaweedfs"
        data.mkdir()
        # Unix sockets need a short path (108 bytes); pytest's tmp paths can be longer.
        self.sock_dir = tempfile.mkdtemp(prefix="sf-weed-")
        config = work_dir / "seaweedfs-s3.json"
        config.write_text(json.dumps(self._identities()))
        self.port = free_port()
        args = [binary, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}"]
        args += self._port_args() + [
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=16",
            # The default (1% of the disk) refuses writes on a big disk that is nearly full.
            "-volume.minFreeSpace=64MiB",
            "-filer",
            f"-filer.localSocket={self.sock_dir}/filer.sock",
            "-s3",
            f"-s3.config={config}",
            f"-s3.localSocket={self.sock_dir}/s3.sock",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]
        self.log_path = work_dir / "seaweedfs.log"
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self._wait_port(SEAWEED_START_TIMEOUT_S, "weed server")
            self._connect(work_dir)
            self._create_bucket(time.monotonic() + SEAWEED_START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def _port_args(self) -> list[str]:
        # weed derives a gRPC port as HTTP port + 10000 unless told: give each one explicitly.
        ports = {self.port}
        while len(ports) < 8:
            ports.add(free_port())
        free = sorted(ports - {self.port})
        out = [f"-s3.port={self.port}", f"-s3.port.grpc={free.pop()}"]
        for role in ("master", "volume", "filer"):
            out += [f"-{role}.port={free.pop()}", f"-{role}.port.grpc={free.pop()}"]
        return out

    @staticmethod
    def _identities() -> dict:
        return {
            "identities": [
                {
                    "name": "streamforge",
                    "credentials": [{"accessKey": SEAWEED_ACCESS_KEY, "secretKey": SEAWEED_SECRET_KEY}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }

    def _create_bucket(self, deadline: float) -> None:
        """The gateway listens before the filer and a writable volume are ready: retry, bounded."""
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed server exited with {self.proc.returncode}")
            try:
                self.s3.create_bucket(Bucket=BUCKET)
                self.s3.put_object(Bucket=BUCKET, Key="probe", Body=b"ready")
                self.s3.delete_object(Bucket=BUCKET, Key="probe")
                return
            except Exception as e:  # botocore's errors while the cluster comes up
                last = e
                time.sleep(0.5)
        self.log.flush()
        tail = (self.log_path.read_text(errors="replace").splitlines() or [""])[-5:]
        raise TimeoutError(f"SeaweedFS S3 gateway not ready: {last}; log tail (a full disk shows as "
                           f"'Not enough data nodes'): {tail}")

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.sock_dir, ignore_errors=True)


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
