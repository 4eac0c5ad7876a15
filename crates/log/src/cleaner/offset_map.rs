//! The cleaner's key → latest offset map, in a fixed amount of memory (Kafka's
//! `SkimpyOffsetMap`): open addressing over slots of a 128-bit key hash and an offset. Keys
//! themselves are not stored; two keys colliding in 128 bits is as unlikely as Kafka's MD5 rule
//! assumes (about 2^-64 for 2^32 keys).

use std::hash::{Hash, Hasher};

/// Bytes one slot takes: a 128-bit hash and an offset.
pub const SLOT_BYTES: usize = 24;
/// Fraction of the slots filled before the map reports itself full (Kafka's
/// `log.cleaner.io.buffer.load.factor` default 0.9).
pub const LOAD_FACTOR: f64 = 0.9;
/// Smallest map: a dedupe buffer below this is raised to it.
const MIN_SLOTS: usize = 16;

/// An empty slot. Slots hold `offset + 1`, so a new map is all zeros, which the allocator
/// hands out as untouched pages (no memset of the whole buffer per pass).
const EMPTY: i64 = 0;

/// Key → latest offset, bounded by the memory given at creation.
pub struct OffsetMap {
    hashes: Vec<[u64; 2]>,
    offsets: Vec<i64>,
    entries: usize,
    max_entries: usize,
    /// The largest offset put.
    latest_offset: i64,
}

fn key_hash(key: &[u8]) -> [u64; 2] {
    let mut a = std::hash::DefaultHasher::new();
    0u8.hash(&mut a);
    key.hash(&mut a);
    let mut b = std::hash::DefaultHasher::new();
    1u8.hash(&mut b);
    key.hash(&mut b);
    [a.finish(), b.finish()]
}

impl OffsetMap {
    /// A map using at most about `memory_bytes` (`log.cleaner.dedupe.buffer.size` per thread).
    /// The memory is zeroed lazily by the allocator, so a map used for few keys touches few pages.
    pub fn with_memory(memory_bytes: usize) -> OffsetMap {
        OffsetMap::with_memory_for(memory_bytes, usize::MAX)
    }

    /// A map of at most `memory_bytes`, and no larger than `max_keys` keys need (a pass over
    /// few records does not touch the whole dedupe buffer).
    pub fn with_memory_for(memory_bytes: usize, max_keys: usize) -> OffsetMap {
        let needed = ((max_keys as f64 / LOAD_FACTOR) as usize).saturating_add(1);
        let slots = (memory_bytes / SLOT_BYTES).min(needed).max(MIN_SLOTS);
        OffsetMap {
            hashes: vec![[0; 2]; slots],
            offsets: vec![EMPTY; slots],
            entries: 0,
            max_entries: (slots as f64 * LOAD_FACTOR) as usize,
            latest_offset: -1,
        }
    }

    /// Keys the map holds before it is full.
    pub fn capacity(&self) -> usize {
        self.max_entries
    }
    pub fn len(&self) -> usize {
        self.entries
    }
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
    /// Whether `more` new keys might not fit.
    pub fn would_overflow(&self, more: usize) -> bool {
        self.entries.saturating_add(more) > self.max_entries
    }
    pub fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    fn slot_of(&self, hash: [u64; 2]) -> usize {
        // Linear probing; the map is never full (load factor < 1), so the walk ends.
        let n = self.hashes.len();
        let mut i = (hash[0] % n as u64) as usize;
        loop {
            if self.offsets[i] == EMPTY || self.hashes[i] == hash {
                return i;
            }
            i = (i + 1) % n;
        }
    }

    /// Record `offset` as the latest for `key`. Offsets must be put in ascending order; the
    /// caller checks `would_overflow` first (a new key past capacity is a bug).
    pub fn put(&mut self, key: &[u8], offset: i64) {
        assert!(offset >= 0, "offsets are never negative");
        let hash = key_hash(key);
        let i = self.slot_of(hash);
        if self.offsets[i] == EMPTY {
            assert!(self.entries < self.max_entries, "offset map over capacity");
            self.entries += 1;
            self.hashes[i] = hash;
        }
        self.offsets[i] = offset + 1;
        self.latest_offset = self.latest_offset.max(offset);
    }

    /// The latest offset recorded for `key`, if any.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        let i = self.slot_of(key_hash(key));
        (self.offsets[i] != EMPTY).then(|| self.offsets[i] - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_offset_per_key_and_reports_capacity() {
        let mut m = OffsetMap::with_memory(1024 * SLOT_BYTES);
        assert_eq!(m.capacity(), (1024.0 * LOAD_FACTOR) as usize);
        for i in 0..500i64 {
            m.put(format!("k{}", i % 100).as_bytes(), i);
        }
        assert_eq!(m.len(), 100);
        assert_eq!(m.get(b"k7"), Some(407));
        assert_eq!(m.get(b"nope"), None);
        assert_eq!(m.latest_offset(), 499);
        assert!(!m.would_overflow(m.capacity() - 100));
        assert!(m.would_overflow(m.capacity() - 99));
        m.put(b"zero", 0);
        assert_eq!(m.get(b"zero"), Some(0));
        let small = OffsetMap::with_memory_for(1 << 30, 1000);
        assert!(small.capacity() >= 1000 && small.capacity() < 1100);
    }
}
