//! Kafka's default partitioner: `toPositive(murmur2(key)) % partitions` for keyed records, and a
//! sticky partition for keyless ones that changes only when a batch for it is closed (KIP-480),
//! so keyless records fill whole batches instead of spraying one record per partition.
use std::collections::HashMap;

use rand::Rng;

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), bit for bit.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for a key.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    debug_assert!(partitions > 0);
    (murmur2(key) & 0x7fff_ffff) % partitions
}

/// Chooses partitions for records, keeping the sticky state of keyless records per topic.
#[derive(Debug, Default)]
pub struct Partitioner {
    sticky: HashMap<String, i32>,
}

impl Partitioner {
    pub fn partition(&mut self, topic: &str, key: Option<&[u8]>, partitions: i32) -> i32 {
        match key {
            Some(k) => partition_for_key(k, partitions),
            None => match self.sticky.get(topic) {
                Some(&p) if p < partitions => p,
                _ => {
                    let p = rand::rng().random_range(0..partitions);
                    self.sticky.insert(topic.to_string(), p);
                    p
                }
            },
        }
    }

    /// Called when the batch of the sticky partition is closed: move keyless records elsewhere.
    pub fn on_batch_closed(&mut self, topic: &str, partition: i32, partitions: i32) {
        if let Some(p) = self.sticky.get_mut(topic)
            && *p == partition
            && partitions > 1
        {
            let step = rand::rng().random_range(1..partitions);
            *p = (partition + step) % partitions;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka() {
        // Expected values from Kafka's own UtilsTest / librdkafka's rdmurmur2 test vectors.
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
            (b"1", -1993445489),
            (b"12", 126087238),
            (b"123", -267702483),
            (b"1234", -1614185708),
            (b"12345", -1188365604),
        ];
        for (data, want) in cases {
            assert_eq!(
                murmur2(data),
                *want,
                "murmur2({:?})",
                String::from_utf8_lossy(data)
            );
        }
    }

    #[test]
    fn keyed_partition_is_positive_modulo() {
        // murmur2("21") is negative; Kafka masks the sign bit before the modulo.
        assert_eq!(
            partition_for_key(b"21", 10),
            ((-973932308i32) & 0x7fff_ffff) % 10
        );
        for n in 1..20 {
            let p = partition_for_key(b"some key", n);
            assert!((0..n).contains(&p));
        }
    }

    #[test]
    fn keyless_records_stick_until_batch_closes() {
        let mut p = Partitioner::default();
        let first = p.partition("t", None, 8);
        for _ in 0..100 {
            assert_eq!(p.partition("t", None, 8), first);
        }
        p.on_batch_closed("t", first, 8);
        let second = p.partition("t", None, 8);
        assert_ne!(second, first);
        assert_eq!(p.partition("t", None, 1), 0);
    }
}
