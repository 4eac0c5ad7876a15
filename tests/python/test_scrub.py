"""Background scrub (--log-scrub-interval-ms): a flipped payload byte in a sealed segment that
no one reads is found by the scrub, logged at ERROR with the file, and counted once in
streamforge_scrub_errors_total, while the broker keeps serving."""

from __future__ import annotations

import time
import urllib.request

from dataset import create_topic
from test_damaged_files import SEGMENT_BYTES, batch_starts, flip, produce, segments

SCRUB_INTERVAL_MS = 200
MESSAGE = "scrub found a damaged record batch"


def scrub_errors(broker) -> float | None:
    text = urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("streamforge_scrub_errors_total"):
            return float(line.split()[-1])
    return None


def test_the_scrub_finds_a_damaged_sealed_batch_once(broker_factory, topic_name):
    broker = broker_factory(
        extra_args=["--segment-bytes", str(SEGMENT_BYTES), "--log-scrub-interval-ms", str(SCRUB_INTERVAL_MS)],
        http=True,
    )
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, 1, 1500)
    part_dir = broker.data_dir / f"{topic_name}-0"
    sealed = segments(part_dir, ".log")[1]
    time.sleep(5 * SCRUB_INTERVAL_MS / 1000)
    assert scrub_errors(broker) == 0 and MESSAGE not in broker.log_text()

    starts = batch_starts(sealed)
    flip(sealed, starts[len(starts) // 2] + 61 + 20)  # a record byte: only the CRC sees it
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and scrub_errors(broker) != 1:
        time.sleep(0.1)
    assert scrub_errors(broker) == 1
    time.sleep(5 * SCRUB_INTERVAL_MS / 1000)  # more passes: still counted and logged once
    assert scrub_errors(broker) == 1
    lines = [l for l in broker.log_text().splitlines() if MESSAGE in l]
    assert len(lines) == 1 and "ERROR" in lines[0] and sealed.name in lines[0], lines
    assert f"position={starts[len(starts) // 2]}" in lines[0], lines[0]
    produce(broker.bootstrap, topic_name, 1, 10)  # still serving
    assert broker.is_running()
