//! Hand-written Fetch response writer (v4..=15; v13+ names topics by id). Record data is never copied: the segment
//! slices the log returns become chunks of the response, written with one vectored write.
//! Only the small metadata between them is serialized into fresh buffers.

use bytes::{BufMut, Bytes, BytesMut};

use crate::frame::{FRAME_PREFIX_BYTES, ResponseFrame};

/// Lowest and highest Fetch version this writer produces.
pub const FETCH_VERSION_MIN: i16 = 4;
pub const FETCH_VERSION_MAX: i16 = 15;
/// First Fetch version that names topics by id (KIP-516) rather than by name.
pub const FETCH_TOPIC_ID_VERSION: i16 = 13;
/// First flexible (compact encodings, tagged fields) Fetch version.
const FETCH_FLEXIBLE_VERSION: i16 = 12;

/// An aborted transaction range (read_committed consumers skip it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// One partition of a Fetch response.
#[derive(Debug, Clone, Default)]
pub struct FetchPartition {
    pub partition_index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// `None` = null (read_uncommitted); `Some` = a list (read_committed).
    pub aborted_transactions: Option<Vec<AbortedTxn>>,
    /// Whole record batches as zero-copy slices of segment files.
    pub records: Vec<Bytes>,
    /// A follower's log diverges: `(epoch, end offset)` to truncate by (v12+ tagged field 0).
    pub diverging_epoch: Option<(i32, i64)>,
    /// KIP-392 (v11+): the replica the consumer should fetch from instead (`None` = -1).
    pub preferred_read_replica: Option<i32>,
}

/// One topic of a Fetch response.
#[derive(Debug, Clone, Default)]
pub struct FetchTopic {
    pub name: String,
    /// The topic's id (written instead of the name at v13+).
    pub topic_id: [u8; 16],
    pub partitions: Vec<FetchPartition>,
}

/// Top-level Fetch response fields.
#[derive(Debug, Clone, Default)]
pub struct FetchResponseParts {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub session_id: i32,
    pub topics: Vec<FetchTopic>,
}

/// Serialize a Fetch response at `version` as a chunk list: metadata buffers interleaved with
/// the record slices. `version` must be within `FETCH_VERSION_MIN..=FETCH_VERSION_MAX`.
pub fn write_fetch_response(
    version: i16,
    correlation_id: i32,
    parts: &FetchResponseParts,
) -> ResponseFrame {
    assert!(
        (FETCH_VERSION_MIN..=FETCH_VERSION_MAX).contains(&version),
        "fetch writer asked for unsupported version {version}"
    );
    let flexible = version >= FETCH_FLEXIBLE_VERSION;
    let mut w = ChunkWriter::default();
    // Placeholder chunk for the length prefix + response header, filled in at the end.
    w.chunks.push(Bytes::new());

    w.cur.put_i32(parts.throttle_time_ms);
    if version >= 7 {
        w.cur.put_i16(parts.error_code);
        w.cur.put_i32(parts.session_id);
    }
    w.array_len(flexible, parts.topics.len());
    for topic in &parts.topics {
        if version >= FETCH_TOPIC_ID_VERSION {
            w.cur.put_slice(&topic.topic_id);
        } else {
            w.string(flexible, &topic.name);
        }
        w.array_len(flexible, topic.partitions.len());
        for p in &topic.partitions {
            w.cur.put_i32(p.partition_index);
            w.cur.put_i16(p.error_code);
            w.cur.put_i64(p.high_watermark);
            w.cur.put_i64(p.last_stable_offset);
            if version >= 5 {
                w.cur.put_i64(p.log_start_offset);
            }
            match &p.aborted_transactions {
                None => w.null_array(flexible),
                Some(list) => {
                    w.array_len(flexible, list.len());
                    for a in list {
                        w.cur.put_i64(a.producer_id);
                        w.cur.put_i64(a.first_offset);
                        if flexible {
                            w.cur.put_u8(0);
                        }
                    }
                }
            }
            if version >= 11 {
                w.cur.put_i32(p.preferred_read_replica.unwrap_or(-1));
            }
            let records_bytes: usize = p.records.iter().map(Bytes::len).sum();
            if flexible {
                put_unsigned_varint(&mut w.cur, records_bytes as u32 + 1);
            } else {
                w.cur.put_i32(records_bytes as i32);
            }
            for slice in &p.records {
                w.slice(slice.clone());
            }
            match (flexible, p.diverging_epoch) {
                (true, Some((epoch, end_offset))) => {
                    // One tagged field: tag 0 (DivergingEpoch), 13 bytes: epoch, end offset,
                    // and the struct's own empty tagged fields.
                    w.cur.put_u8(1);
                    w.cur.put_u8(0);
                    w.cur.put_u8(13);
                    w.cur.put_i32(epoch);
                    w.cur.put_i64(end_offset);
                    w.cur.put_u8(0);
                }
                (true, None) => w.cur.put_u8(0), // partition tagged fields
                (false, _) => {}
            }
        }
        if flexible {
            w.cur.put_u8(0); // topic tagged fields
        }
    }
    if flexible {
        w.cur.put_u8(0); // top-level tagged fields
    }
    let mut frame = w.finish(correlation_id, flexible);
    frame.error_codes = std::iter::once(parts.error_code)
        .chain(
            parts
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
        )
        .filter(|c| *c != 0)
        .collect();
    frame
}

#[derive(Default)]
struct ChunkWriter {
    chunks: Vec<Bytes>,
    cur: BytesMut,
    body_bytes: usize,
}

impl ChunkWriter {
    fn array_len(&mut self, flexible: bool, len: usize) {
        if flexible {
            put_unsigned_varint(&mut self.cur, len as u32 + 1);
        } else {
            self.cur.put_i32(len as i32);
        }
    }

    fn null_array(&mut self, flexible: bool) {
        if flexible {
            self.cur.put_u8(0);
        } else {
            self.cur.put_i32(-1);
        }
    }

    fn string(&mut self, flexible: bool, s: &str) {
        if flexible {
            put_unsigned_varint(&mut self.cur, s.len() as u32 + 1);
        } else {
            self.cur.put_i16(s.len() as i16);
        }
        self.cur.put_slice(s.as_bytes());
    }

    fn flush_cur(&mut self) {
        if !self.cur.is_empty() {
            let b = self.cur.split().freeze();
            self.body_bytes += b.len();
            self.chunks.push(b);
        }
    }

    fn slice(&mut self, slice: Bytes) {
        if slice.is_empty() {
            return;
        }
        self.flush_cur();
        self.body_bytes += slice.len();
        self.chunks.push(slice);
    }

    fn finish(mut self, correlation_id: i32, flexible: bool) -> ResponseFrame {
        self.flush_cur();
        let header_bytes = if flexible { 5 } else { 4 };
        let mut head = BytesMut::with_capacity(FRAME_PREFIX_BYTES + header_bytes);
        head.put_i32((header_bytes + self.body_bytes) as i32);
        head.put_i32(correlation_id);
        if flexible {
            head.put_u8(0);
        }
        self.chunks[0] = head.freeze();
        ResponseFrame {
            chunks: self.chunks,
            error_codes: Vec::new(),
            throttle_ms: 0,
        }
    }
}

/// Write an unsigned varint.
pub fn put_unsigned_varint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use kafka_protocol::messages::FetchResponse;
    use kafka_protocol::protocol::Decodable;

    fn sample() -> FetchResponseParts {
        FetchResponseParts {
            throttle_time_ms: 0,
            error_code: 0,
            session_id: 0,
            topics: vec![FetchTopic {
                name: "orders".into(),
                topic_id: [7; 16],
                partitions: vec![
                    FetchPartition {
                        partition_index: 0,
                        high_watermark: 10,
                        last_stable_offset: 10,
                        log_start_offset: 0,
                        records: vec![
                            Bytes::from_static(b"batch-one"),
                            Bytes::from_static(b"batch-two"),
                        ],
                        ..Default::default()
                    },
                    FetchPartition {
                        partition_index: 3,
                        error_code: crate::ResponseError::OffsetOutOfRange.code(),
                        high_watermark: 5,
                        last_stable_offset: 5,
                        log_start_offset: 2,
                        aborted_transactions: Some(vec![AbortedTxn {
                            producer_id: 9,
                            first_offset: 4,
                        }]),
                        records: vec![],
                        diverging_epoch: Some((3, 17)),
                        preferred_read_replica: Some(2),
                    },
                ],
            }],
        }
    }

    #[test]
    fn every_version_decodes_with_the_generated_codec() {
        for version in FETCH_VERSION_MIN..=FETCH_VERSION_MAX {
            let frame = write_fetch_response(version, 42, &sample());
            let mut flat = BytesMut::new();
            for c in &frame.chunks {
                flat.put_slice(c);
            }
            let mut b = flat.freeze();
            assert_eq!(b.get_i32() as usize, b.len(), "v{version} length prefix");
            assert_eq!(b.get_i32(), 42);
            if version >= 12 {
                assert_eq!(b.get_u8(), 0);
            }
            let resp = FetchResponse::decode(&mut b, version).unwrap();
            assert!(!b.has_remaining(), "v{version} trailing bytes");
            assert_eq!(resp.responses.len(), 1);
            let t = &resp.responses[0];
            if version >= FETCH_TOPIC_ID_VERSION {
                assert_eq!(t.topic_id.as_bytes(), &[7; 16]);
            } else {
                assert_eq!(t.topic.0.as_str(), "orders");
            }
            let p0 = &t.partitions[0];
            assert_eq!(p0.high_watermark, 10);
            assert_eq!(p0.records.as_deref(), Some(&b"batch-onebatch-two"[..]));
            assert!(p0.aborted_transactions.is_none());
            let p1 = &t.partitions[1];
            assert_eq!(p1.partition_index, 3);
            assert_eq!(p1.error_code, crate::ResponseError::OffsetOutOfRange.code());
            if version >= 5 {
                assert_eq!(p1.log_start_offset, 2);
            }
            assert_eq!(p1.aborted_transactions.as_ref().unwrap()[0].producer_id, 9);
            assert_eq!(p1.records.as_deref(), Some(&b""[..]));
            if version >= 12 {
                let d = &p1.diverging_epoch;
                assert_eq!((d.epoch, d.end_offset), (3, 17));
                assert_eq!(
                    t.partitions[0].diverging_epoch.epoch, -1,
                    "absent = default"
                );
            }
            if version >= 11 {
                assert_eq!(p1.preferred_read_replica.0, 2);
                assert_eq!(t.partitions[0].preferred_read_replica.0, -1, "none = -1");
            }
        }
    }

    #[test]
    fn record_slices_are_not_copied() {
        let data = Bytes::from(vec![7u8; 4096]);
        let mut parts = sample();
        parts.topics[0].partitions[0].records = vec![data.clone()];
        let frame = write_fetch_response(11, 1, &parts);
        assert!(frame.chunks.iter().any(|c| c.as_ptr() == data.as_ptr()));
    }
}
