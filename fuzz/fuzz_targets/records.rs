//! The records inside an uncompressed batch: the input's first two bytes are a record count,
//! the rest the records section; the harness wraps it in a valid header (length, CRC) so every
//! input reaches the record iterator (and kafka-protocol's decoder, which must agree).
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamforge_fuzz::batches::batch_around;
use streamforge_protocol::batch::RecordBatch;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 || data.len() > streamforge_fuzz::INPUT_BYTES_MAX {
        return;
    }
    let count = i32::from(u16::from_be_bytes([data[0], data[1]]) % 1024);
    let batch = batch_around(&data[2..], count, 0);
    if let Ok(view) = RecordBatch::parse(&batch) {
        streamforge_fuzz::batches::check_batch(&batch, view);
    }
});
