// Shared dataset and checks for the compatibility tests: N keyed messages with headers; after a
// round trip every message must be back once, with its key/value/headers, offsets contiguous from 0
// in each partition, and the production order kept within each partition.
import assert from 'node:assert/strict';

export const MESSAGES = 10_000;
export const PARTITIONS = 4;
const KEYS = 97;

export function makeMessage(i, codec) {
  return {
    key: `key-${i % KEYS}`,
    value: `value-${i}-${codec}-${'x'.repeat(20 + (i % 40))}`,
    headers: { seq: String(i), codec, bin: Buffer.from([0, 1, 2, 255 - (i % 256)]) },
  };
}

// consumed: [{ partition, offset (number), key (string), value (string), headers }]
export function verifyRoundTrip(consumed, codec, n = MESSAGES) {
  assert.equal(consumed.length, n, `consumed ${consumed.length} messages, want ${n}`);
  const byPartition = new Map();
  const seen = new Set();
  const keyPartition = new Map();
  for (const m of consumed) {
    const seq = Number(m.headers.seq.toString());
    assert.ok(!seen.has(seq), `duplicate seq ${seq}`);
    seen.add(seq);
    const want = makeMessage(seq, codec);
    assert.equal(m.key, want.key, `key of seq ${seq}`);
    assert.equal(m.value, want.value, `value of seq ${seq}`);
    assert.equal(m.headers.codec.toString(), codec);
    assert.deepEqual(Buffer.from(m.headers.bin), want.headers.bin, `binary header of seq ${seq}`);
    if (keyPartition.has(m.key)) assert.equal(keyPartition.get(m.key), m.partition, `key ${m.key} in two partitions`);
    keyPartition.set(m.key, m.partition);
    if (!byPartition.has(m.partition)) byPartition.set(m.partition, []);
    byPartition.get(m.partition).push({ offset: m.offset, seq });
  }
  assert.ok(byPartition.size >= 2, `only ${byPartition.size} partition(s) used`);
  for (const [p, list] of byPartition) {
    list.sort((a, b) => a.offset - b.offset);
    list.forEach((e, idx) => {
      assert.equal(e.offset, idx, `partition ${p}: offsets not contiguous from 0 at index ${idx}`);
      if (idx > 0) assert.ok(e.seq > list[idx - 1].seq, `partition ${p}: order broken at offset ${e.offset}`);
    });
  }
  return byPartition;
}
