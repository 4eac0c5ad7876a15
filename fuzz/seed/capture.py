#!/usr/bin/env python3
"""Build the fuzz seed corpus from real client traffic (see docs/FUZZING.md).

Starts the real broker (debug binary) on 127.0.0.1 with a local-directory remote store, puts a
small TCP proxy in front of it (the broker advertises the proxy, so every client connection goes
through it), runs confluent-kafka and kafka-python clients through a bounded workload (admin,
producers with every codec, idempotence, consumer groups with commits), and writes:

- every request frame (without the length prefix) to request_any/ and request_header/, and to
  the dedicated target of its api key (produce_request/, fetch_request/, ...);
- from Produce frames: each partition's record set (record_batch/, log_append/), each batch's
  records (records/: 2-byte count + records) or compressed records (compression/: codec byte +
  bytes);
- from JoinGroup/SyncGroup frames: consumer-protocol subscriptions and assignments
  (consumer_protocol/);
- after the run, from the broker's data and remote-store directories: segment files
  (log_recover/), __consumer_offsets batches (coordinator_records/), manifests and remote
  indexes (tiered_manifest/, tiered_remote_index/).

Each seed is named by its SHA-1; at most SEEDS_PER_TARGET_MAX per target, each at most
SEED_BYTES_MAX. Usage: capture.py OUT_DIR [--broker BIN]. Needs confluent-kafka and
kafka-python (tests/python/requirements.txt). Every step is bounded in time.
"""

import argparse
import hashlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SEEDS_PER_TARGET_MAX = 60
SEED_BYTES_MAX = 64 * 1024
FRAME_BYTES_MAX = 8 * 1024 * 1024
STEP_TIMEOUT_S = 30
START_TIMEOUT_S = 30
MESSAGES_PER_PRODUCER = 40
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

DEDICATED = {
    0: "produce_request",
    1: "fetch_request",
    3: "metadata_request",
    8: "offset_commit_request",
    11: "join_group_request",
    14: "sync_group_request",
    18: "api_versions_request",
    19: "create_topics_request",
}
# First flexible version of the request header (v2) for the bodies parsed here.
FLEXIBLE_FROM = {0: 9, 11: 6, 14: 4}


class Seeds:
    """Writes deduplicated, bounded seed files per target."""

    def __init__(self, root: Path):
        self.root = root
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()

    def add(self, target: str, data: bytes) -> None:
        if not data or len(data) > SEED_BYTES_MAX:
            return
        with self.lock:
            if self.counts.get(target, 0) >= SEEDS_PER_TARGET_MAX:
                return
            d = self.root / target
            d.mkdir(parents=True, exist_ok=True)
            p = d / hashlib.sha1(data).hexdigest()
            if not p.exists():
                p.write_bytes(data)
                self.counts[target] = self.counts.get(target, 0) + 1


class Reader:
    """Kafka primitive types, classic or flexible (compact) encoding."""

    def __init__(self, b: bytes, flexible: bool):
        self.b, self.pos, self.flexible = b, 0, flexible

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.b):
            raise ValueError("truncated")
        out = self.b[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uvarint(self) -> int:
        v = 0
        for i in range(5):
            b = self.take(1)[0]
            v |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                return v
        raise ValueError("varint")

    def length(self, classic) -> int:
        return self.uvarint() - 1 if self.flexible else classic()

    def string(self) -> bytes | None:
        n = self.length(self.i16)
        return None if n < 0 else self.take(n)

    def bytes_(self) -> bytes | None:
        n = self.length(self.i32)
        return None if n < 0 else self.take(n)

    def array_len(self) -> int:
        return max(self.length(self.i32), 0)

    def tagged(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.take(self.uvarint())


def body_reader(frame: bytes) -> tuple[int, int, Reader]:
    key, version = struct.unpack(">hh", frame[:4])
    flexible = version >= FLEXIBLE_FROM.get(key, 1 << 15)
    r = Reader(frame, False)
    r.take(8)
    r.string()  # client id: always a classic nullable string
    r.flexible = flexible
    r.tagged()
    return key, version, r


def split_produce(r: Reader, seeds: Seeds) -> None:
    r.string()  # transactional id
    r.i16()
    r.i32()
    for _ in range(r.array_len()):
        r.string()
        for _ in range(r.array_len()):
            r.i32()
            records = r.bytes_()
            r.tagged()
            if records:
                seeds.add("record_batch", records)
                seeds.add("log_append", records)
                split_batches(records, seeds)
        r.tagged()


def split_batches(records: bytes, seeds: Seeds) -> None:
    pos = 0
    while pos + 61 <= len(records):
        length = struct.unpack(">i", records[pos + 8 : pos + 12])[0]
        end = pos + 12 + length
        if length < 49 or end > len(records):
            return
        batch = records[pos:end]
        attributes = struct.unpack(">h", batch[21:23])[0]
        count = struct.unpack(">i", batch[57:61])[0]
        if attributes & 7 == 0:
            seeds.add("records", struct.pack(">H", count & 0xFFFF) + batch[61:])
        else:
            seeds.add("compression", bytes([attributes & 7]) + batch[61:])
            seeds.add("compression", bytes([0x10 | (attributes & 7)]) + batch[61:])
        pos = end


def split_group(key: int, version: int, r: Reader, seeds: Seeds) -> None:
    r.string()
    if key == 11:  # JoinGroup
        r.i32()
        if version >= 1:
            r.i32()
        r.string()
        if version >= 5:
            r.string()
        r.string()
        for _ in range(r.array_len()):
            r.string()
            metadata = r.bytes_()
            r.tagged()
            if metadata:
                seeds.add("consumer_protocol", b"\x00" + metadata)
    else:  # SyncGroup
        r.i32()
        r.string()
        if version >= 3:
            r.string()
        if version >= 5:
            r.string()
            r.string()
        for _ in range(r.array_len()):
            r.string()
            assignment = r.bytes_()
            r.tagged()
            if assignment:
                seeds.add("consumer_protocol", b"\x01" + assignment)


def on_request(frame: bytes, seeds: Seeds) -> None:
    if len(frame) < 8:
        return
    seeds.add("request_any", frame)
    seeds.add("request_header", frame)
    key = struct.unpack(">h", frame[:2])[0]
    if key in DEDICATED:
        seeds.add(DEDICATED[key], frame)
    try:
        key, version, r = body_reader(frame)
        if key == 0 and version >= 3:
            split_produce(r, seeds)
        elif key in (11, 14):
            split_group(key, version, r, seeds)
    except (ValueError, struct.error):
        pass  # a frame these small parsers do not follow still went to request_any


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def pipe_requests(client: socket.socket, broker: socket.socket, seeds: Seeds) -> None:
    try:
        while True:
            prefix = recv_exact(client, 4)
            if prefix is None:
                break
            size = struct.unpack(">i", prefix)[0]
            if size < 0 or size > FRAME_BYTES_MAX:
                break
            frame = recv_exact(client, size)
            if frame is None:
                break
            on_request(frame, seeds)
            broker.sendall(prefix + frame)
    except OSError:
        pass
    finally:
        for s in (client, broker):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def pipe_responses(broker: socket.socket, client: socket.socket) -> None:
    try:
        while True:
            data = broker.recv(65536)
            if not data:
                break
            client.sendall(data)
    except OSError:
        pass


def proxy(listener: socket.socket, broker_port: int, seeds: Seeds, stop: threading.Event) -> None:
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            client, _ = listener.accept()
        except socket.timeout:
            continue
        client.settimeout(None)
        broker = socket.create_connection(("127.0.0.1", broker_port), timeout=STEP_TIMEOUT_S)
        broker.settimeout(None)
        threading.Thread(target=pipe_requests, args=(client, broker, seeds), daemon=True).start()
        threading.Thread(target=pipe_responses, args=(broker, client), daemon=True).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("broker did not start")


def run_clients(bootstrap: str) -> None:
    from seed_clients import confluent_workload, kafka_python_workload

    confluent_workload(bootstrap)
    kafka_python_workload(bootstrap)


def harvest_files(data_dir: Path, remote_dir: Path, seeds: Seeds) -> None:
    for log in sorted(data_dir.rglob("*.log")):
        data = whole_batches(log.read_bytes())
        if not data:
            continue
        if log.parent.name.startswith("__consumer_offsets"):
            seeds.add("coordinator_records", data)
        seeds.add("log_recover", b"\x00" + data)
        seeds.add("log_recover", b"\x01" + data)
        seeds.add("record_batch", data)
    for f in sorted(p for p in remote_dir.rglob("*") if p.is_file()):
        data = f.read_bytes()
        if data.startswith(b"SFRI"):
            seeds.add("tiered_remote_index", data)
        elif data.lstrip().startswith(b"{") and b'"segments"' in data:
            seeds.add("tiered_manifest", data)


def whole_batches(data: bytes) -> bytes:
    """The longest prefix of whole batches that fits in a seed."""
    pos = 0
    while pos + 12 <= len(data):
        end = pos + 12 + struct.unpack(">i", data[pos + 8 : pos + 12])[0]
        if end > len(data) or end > SEED_BYTES_MAX - 1 or end <= pos + 12:
            break
        pos = end
    return data[:pos]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    root = Path(__file__).resolve().parents[2]
    default_bin = os.environ.get("STREAMFORGE_BIN") or str(root / "target/debug/streamforge")
    ap.add_argument("--broker", default=default_bin)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))

    work = Path(tempfile.mkdtemp(prefix="sf-fuzz-seed-"))
    data_dir, remote_dir = work / "data", work / "remote"
    remote_dir.mkdir(parents=True)
    seeds = Seeds(args.out)
    broker_port, proxy_port = free_port(), free_port()
    listener = socket.create_server(("127.0.0.1", proxy_port))
    cmd = [args.broker, "broker", "--listen", f"127.0.0.1:{broker_port}",
           "--advertised-listener", f"127.0.0.1:{proxy_port}", "--data-dir", str(data_dir),
           "--http-listen", "off", "--remote-storage", remote_dir.as_uri(),
           "--remote-task-interval-ms", "200"]
    log = open(work / "broker.log", "wb")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    stop = threading.Event()
    try:
        wait_port(broker_port, proc)
        threading.Thread(target=proxy, args=(listener, broker_port, seeds, stop), daemon=True).start()
        run_clients(f"127.0.0.1:{proxy_port}")
        time.sleep(2)  # let the tiering task upload sealed segments
    finally:
        stop.set()
        proc.terminate()
        try:
            proc.wait(timeout=STEP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    harvest_files(data_dir, remote_dir, seeds)
    if not os.environ.get("SF_SEED_KEEP_WORK"):
        shutil.rmtree(work, ignore_errors=True)
    for target, n in sorted(seeds.counts.items()):
        print(f"seeds {target}: {n}")
    total = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"seeds total: {sum(seeds.counts.values())} files, {total} bytes in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
