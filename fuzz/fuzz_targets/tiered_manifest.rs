//! The tiered-storage partition manifest (JSON read back from the object store): decode never
//! panics; a manifest that decodes is valid, and encode-then-decode returns it unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamforge_tiered::manifest::PartitionManifest;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = PartitionManifest::decode("fuzz", data) else {
        return;
    };
    m.validate().expect("decode returned an invalid manifest");
    let back = PartitionManifest::decode("fuzz", &m.encode()).expect("our own manifest decodes");
    assert_eq!(back, m);
    let _ = (m.next_offset(), m.start_offset(), m.size_bytes());
    for s in &m.segments {
        if s.base_offset >= m.log_start_offset {
            let found = m.segment_for(s.base_offset).map(|x| &x.segment_id);
            assert_eq!(found, Some(&s.segment_id));
        }
        let _ = m.segment_after(s.base_offset);
        let _ = m.segment_for(s.last_offset);
    }
});
