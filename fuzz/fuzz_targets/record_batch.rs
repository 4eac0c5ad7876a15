//! Concatenated RecordBatch v2 bytes (a Produce partition's records, a segment's contents):
//! header view, CRC, header validation, the in-place rewrites the log does, the tiered crate's
//! parser and kafka-protocol's decoder, which must all agree.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() <= streamforge_fuzz::INPUT_BYTES_MAX {
        streamforge_fuzz::batches::check_batches(data);
    }
});
