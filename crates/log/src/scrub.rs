//! Background scrubbing of sealed segments: their bytes never change (a sealed segment is only
//! ever deleted, or copied on truncation), so the broker takes zero-copy slices of them under
//! the log's lock ([`crate::Log::sealed_segments`]) and checks every batch's CRC and header with
//! [`verify_segment`] after releasing it: appends and reads never wait for a scrub.

use std::path::PathBuf;

use bytes::Bytes;
use streamforge_protocol::batch::BatchIter;

use crate::segment::BadBatch;

/// The whole contents of one sealed segment, to verify outside the log's lock.
#[derive(Debug, Clone)]
pub struct SealedSegment {
    pub base_offset: i64,
    /// Its `.log` file (for messages).
    pub path: PathBuf,
    /// Every byte of the segment (a slice of its mapping; the segment stays readable through
    /// it even if it is deleted meanwhile).
    pub bytes: Bytes,
}

/// Check every batch of `segment`: CRC, header consistency, and offsets that start at the
/// segment's base (or later) and increase. The first bad batch, if any.
pub fn verify_segment(segment: &SealedSegment) -> Option<BadBatch> {
    let mut expected = segment.base_offset;
    // Where the next batch starts (a parse failure is reported there).
    let mut position = 0u64;
    for item in BatchIter::new(&segment.bytes) {
        let checked = item.map_err(|e| e.to_string()).and_then(|(_, batch)| {
            batch.verify_crc().map_err(|e| e.to_string())?;
            crate::stored_batch::validate_stored_header(&batch).map_err(|e| e.to_string())?;
            if batch.base_offset() < expected {
                return Err(format!(
                    "offset {} does not follow {}",
                    batch.base_offset(),
                    expected - 1
                ));
            }
            Ok((batch.last_offset() + 1, batch.size_bytes() as u64))
        });
        match checked {
            Ok((next, size)) => {
                expected = next;
                position += size;
            }
            Err(error) => {
                return Some(BadBatch {
                    position,
                    offset: expected,
                    error,
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

    use crate::{Log, LogConfig, verify_segment};

    #[test]
    fn sealed_segments_are_verified_outside_the_log_and_damage_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 4096,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config, 0).unwrap();
        for _ in 0..40 {
            let mut b = build_simple(BatchSpec::default(), 3, 100);
            log.append_as_leader(&mut b, 0, 0).unwrap();
        }
        let sealed = log.sealed_segments();
        assert_eq!(sealed.len(), log.segment_count() - 1);
        assert!(sealed.iter().all(|s| verify_segment(s).is_none()));
        // Flip a record byte of the second batch of the first sealed segment (the mapping sees
        // the file's bytes; only the CRC can tell).
        let first = &sealed[0];
        let second_batch = streamforge_protocol::batch::RecordBatch::parse(&first.bytes)
            .unwrap()
            .size_bytes();
        let mut bytes = std::fs::read(&first.path).unwrap();
        bytes[second_batch + streamforge_protocol::batch::HEADER_BYTES + 10] ^= 0x5a;
        std::fs::write(&first.path, &bytes).unwrap();
        let again = log.sealed_segments();
        let bad = verify_segment(&again[0]).expect("damage found");
        assert_eq!(bad.position, second_batch as u64);
        assert_eq!(bad.offset, 3);
        // Appends go on while slices are held.
        let mut b = build_simple(BatchSpec::default(), 3, 100);
        log.append_as_leader(&mut b, 0, 0).unwrap();
        assert!(verify_segment(&again[1]).is_none());
    }
}
