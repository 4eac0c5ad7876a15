//! The remote offset/time index stored next to each uploaded segment: decode never panics, a
//! decoded index re-encodes to the very same bytes, and lookups stay inside the index.
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamforge_tiered::remote_index::RemoteIndex;

fuzz_target!(|data: &[u8]| {
    let Ok(index) = RemoteIndex::decode("fuzz", data) else {
        return;
    };
    assert_eq!(&index.encode()[..], data, "re-encoding changes the bytes");
    let max_position = index.entries().iter().map(|e| u64::from(e.position)).max();
    for e in index.entries() {
        for offset in [
            e.base_offset,
            e.base_offset.wrapping_add(1),
            i64::MIN,
            i64::MAX,
        ] {
            let p = index.position_for_offset(offset);
            assert!(p == 0 || Some(p) <= max_position);
        }
        let p = index.position_for_timestamp(e.max_timestamp_before_ms);
        assert!(p == 0 || Some(p) <= max_position);
    }
});
