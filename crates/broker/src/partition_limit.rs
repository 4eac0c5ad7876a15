//! The broker-wide partition limit. Every partition holds open files and memory mappings for
//! as long as the broker runs (measured: an empty partition holds 4 descriptors — the segment
//! log, its two indexes and the directory — and 3 mappings; each further segment adds 3 and
//! 2). Past the process limits, creating one more partition fails half-way (EMFILE/ENOMEM)
//! and so does every later connection accept, so the broker refuses new partitions before
//! that. Kafka has no such limit; Redpanda has one (`topic_partitions_per_shard`).

/// Descriptors budgeted per partition: 4 for an empty one, plus room for a rolled segment.
pub const FDS_PER_PARTITION: u64 = 6;
/// Mappings budgeted per partition: 3 for an empty one, plus room for a rolled segment.
pub const MAPS_PER_PARTITION: u64 = 5;
/// Descriptors kept for everything else (connections, checkpoints, the data dir), at most.
pub const FDS_RESERVED_MAX: u64 = 1024;
/// The share of `vm.max_map_count` kept for the allocator and the rest of the process.
pub const MAPS_RESERVED_DIVISOR: u64 = 4;
/// Never derive a limit below this (a tiny fd limit still gets a usable broker).
pub const PARTITIONS_DERIVED_MIN: usize = 64;
/// `vm.max_map_count` when it cannot be read (the Linux default).
const MAX_MAP_COUNT_DEFAULT: u64 = 65_530;

/// The limit in force: `configured`, or one derived from the soft `RLIMIT_NOFILE` and
/// `vm.max_map_count` of this process now (call after any raising of the soft limit).
pub fn resolve(configured: Option<usize>) -> usize {
    if let Some(n) = configured {
        return n;
    }
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(MAX_MAP_COUNT_DEFAULT);
    derive(nofile, max_map_count)
}

/// The partitions that fit `nofile` descriptors and `max_map_count` mappings.
pub fn derive(nofile: u64, max_map_count: u64) -> usize {
    let fds = nofile.saturating_sub(FDS_RESERVED_MAX.min(nofile / 4)) / FDS_PER_PARTITION;
    let maps =
        max_map_count.saturating_sub(max_map_count / MAPS_RESERVED_DIVISOR) / MAPS_PER_PARTITION;
    usize::try_from(fds.min(maps))
        .unwrap_or(usize::MAX)
        .max(PARTITIONS_DERIVED_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derives_from_the_tighter_of_fds_and_mappings() {
        // 20,000 fds: (20,000 - 1,024) / 6; mappings allow 9,829.
        assert_eq!(derive(20_000, 65_530), 3_162);
        // 1,024 fds: a quarter reserved.
        assert_eq!(derive(1_024, 65_530), 128);
        // Unlimited fds: the mappings decide.
        assert_eq!(derive(u64::MAX, 65_530), 9_829);
        assert_eq!(derive(10, 65_530), PARTITIONS_DERIVED_MIN);
        assert_eq!(resolve(Some(7)), 7);
    }
}
