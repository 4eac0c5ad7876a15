//! Reading remote segments: remote index -> byte position -> chunk-aligned ranged GETs
//! through the chunk cache, with prefetch for sequential readers and CRC checks on every
//! batch served.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use object_store::ObjectStoreExt;

use crate::batch::{self, BatchInfo};
use crate::error::{Result, TieredError};
use crate::layout::ObjectKind;
use crate::manifest::RemoteSegment;
use crate::remote_index::RemoteIndex;
use crate::stats::{self, add};
use crate::{ChunkKey, RemotePartition, Shared};

/// Batches examined by one read or timestamp lookup at most (bounds the walk; a remote index
/// entry is at most `index_interval_bytes` plus one batch before the target).
const BATCHES_PER_READ_MAX: usize = 1 << 20;

/// A read position inside one remote segment.
struct SegmentReader<'a> {
    sh: &'a Arc<Shared>,
    part: &'a RemotePartition,
    seg: &'a RemoteSegment,
    id: Arc<str>,
    /// Chunks touched by this read (for prefetch decisions).
    first_chunk: Option<u64>,
    last_chunk: u64,
    /// Whether any chunk this read needed had to be fetched from the store.
    missed: bool,
}

impl<'a> SegmentReader<'a> {
    fn new(sh: &'a Arc<Shared>, part: &'a RemotePartition, seg: &'a RemoteSegment) -> Self {
        SegmentReader {
            sh,
            part,
            seg,
            id: seg.segment_id.as_str().into(),
            first_chunk: None,
            last_chunk: 0,
            missed: false,
        }
    }

    fn chunk_bytes(&self) -> u64 {
        self.sh.config.chunk_bytes.max(1)
    }

    /// Bytes `[start, end)` of the segment (clamped to its size).
    async fn range(&mut self, start: u64, end: u64) -> Result<Bytes> {
        let end = end.min(self.seg.size_bytes);
        if start >= end {
            return Ok(Bytes::new());
        }
        let cb = self.chunk_bytes();
        let (first, last) = (start / cb, (end - 1) / cb);
        self.first_chunk.get_or_insert(first);
        self.last_chunk = self.last_chunk.max(last);
        if first == last {
            let (c, hit) = chunk(self.sh, self.part, self.seg, &self.id, first).await?;
            self.missed |= !hit;
            let base = first * cb;
            return Ok(c.slice((start - base) as usize..(end - base) as usize));
        }
        let mut out = BytesMut::with_capacity((end - start) as usize);
        for n in first..=last {
            let (c, hit) = chunk(self.sh, self.part, self.seg, &self.id, n).await?;
            self.missed |= !hit;
            let base = n * cb;
            let from = start.saturating_sub(base) as usize;
            let to = ((end - base) as usize).min(c.len());
            if from >= to {
                return Err(self.truncated(start));
            }
            out.extend_from_slice(&c[from..to]);
        }
        if out.len() as u64 != end - start {
            return Err(self.truncated(start));
        }
        Ok(out.freeze())
    }

    fn key(&self) -> String {
        self.sh
            .layout
            .segment_object(
                &self.part.id,
                self.seg.base_offset,
                &self.seg.segment_id,
                ObjectKind::Log,
            )
            .to_string()
    }

    fn truncated(&self, position: u64) -> TieredError {
        TieredError::RemoteCorrupt {
            key: self.key(),
            position,
            reason: "object shorter than its manifest entry".into(),
        }
    }

    /// Header of the batch at `position`.
    async fn header(&mut self, position: u64) -> Result<BatchInfo> {
        let h = self
            .range(position, position + batch::HEADER_BYTES as u64)
            .await?;
        let info = batch::parse_header(&h).map_err(|e| self.corrupt(position, e.to_string()))?;
        if position + info.size_bytes as u64 > self.seg.size_bytes {
            return Err(self.corrupt(position, "batch runs past the end of the segment".into()));
        }
        Ok(info)
    }

    fn corrupt(&self, position: u64, reason: String) -> TieredError {
        add(&self.sh.stats.corrupt_batches, 1);
        metrics::counter!(stats::CORRUPT_BATCHES, "topic" => self.part.id.topic.clone())
            .increment(1);
        let key = self.key();
        tracing::error!(partition = %self.part.id, key = %key, position, reason = %reason, "corrupt remote segment data detected; not served");
        TieredError::RemoteCorrupt {
            key,
            position,
            reason,
        }
    }
}

async fn index(
    sh: &Arc<Shared>,
    part: &RemotePartition,
    seg: &RemoteSegment,
) -> Result<Arc<RemoteIndex>> {
    let id: Arc<str> = seg.segment_id.as_str().into();
    if let Some(i) = sh.indexes.lock().get(&id) {
        return Ok(i);
    }
    let key = sh.layout.segment_object(
        &part.id,
        seg.base_offset,
        &seg.segment_id,
        ObjectKind::RemoteIndex,
    );
    add(&sh.stats.get_requests, 1);
    let bytes = sh.store.get(&key).await?.bytes().await?;
    let idx = Arc::new(RemoteIndex::decode(key.as_ref(), &bytes)?);
    sh.indexes
        .lock()
        .insert(id, idx.clone(), idx.size_bytes() as u64);
    Ok(idx)
}

/// One chunk of a segment's `.log` object: from the cache (`true`: a hit), or from an
/// in-flight GET of it (a prefetch) or a new ranged GET (`false`: the caller waited for the
/// store).
async fn chunk(
    sh: &Arc<Shared>,
    part: &RemotePartition,
    seg: &RemoteSegment,
    id: &Arc<str>,
    n: u64,
) -> Result<(Bytes, bool)> {
    let key: ChunkKey = (id.clone(), n);
    if let Some(c) = sh.chunks.lock().get(&key) {
        return Ok((c, true));
    }
    let fut = {
        let mut in_flight = sh.in_flight.lock();
        if let Some(f) = in_flight.get(&key) {
            f.clone()
        } else {
            let cb = sh.config.chunk_bytes.max(1);
            let range = n * cb..((n + 1) * cb).min(seg.size_bytes);
            let path = sh.layout.segment_object(
                &part.id,
                seg.base_offset,
                &seg.segment_id,
                ObjectKind::Log,
            );
            let sh2 = sh.clone();
            let key2 = key.clone();
            let f = async move {
                add(&sh2.stats.get_requests, 1);
                let r = sh2.store.get_range(&path, range).await;
                sh2.in_flight.lock().remove(&key2);
                match r {
                    Ok(b) => {
                        add(&sh2.stats.fetched_bytes, b.len() as u64);
                        metrics::counter!(stats::FETCHED_BYTES).increment(b.len() as u64);
                        sh2.chunks.lock().insert(key2, b.clone(), b.len() as u64);
                        Ok(b)
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            .boxed()
            .shared();
            in_flight.insert(key, f.clone());
            f
        }
    };
    let bytes = fut.await.map_err(|e| {
        TieredError::Store(object_store::Error::Generic {
            store: "remote",
            source: e.into(),
        })
    })?;
    Ok((bytes, false))
}

pub(crate) async fn read(
    sh: &Arc<Shared>,
    part: &RemotePartition,
    offset: i64,
    max_bytes: usize,
    max_offset: i64,
    min_one_message: bool,
) -> Result<Bytes> {
    let started = Instant::now();
    let manifest = part.manifest();
    let seg = manifest
        .segment_for(offset)
        .ok_or(TieredError::OffsetNotRemote { offset })?;
    let idx = index(sh, part, seg).await?;
    let mut r = SegmentReader::new(sh, part, seg);
    // Find the batch containing `offset`.
    let mut position = idx.position_for_offset(offset);
    let mut walked = 0usize;
    let first = loop {
        if position >= seg.size_bytes || walked >= BATCHES_PER_READ_MAX {
            return Err(TieredError::OffsetNotRemote { offset });
        }
        let h = r.header(position).await?;
        if h.last_offset >= offset {
            break h;
        }
        position += h.size_bytes as u64;
        walked += 1;
    };
    // Take whole batches up to max_bytes.
    let start = position;
    let mut end = position;
    let mut next = Some(first);
    let mut taken = 0usize;
    while let Some(h) = next {
        if h.base_offset >= max_offset {
            break;
        }
        let size = h.size_bytes;
        let fits = (end - start) as usize + size <= max_bytes;
        let first_forced = taken == 0 && min_one_message;
        if !(fits || first_forced) {
            break;
        }
        end += size as u64;
        taken += 1;
        if !fits || end >= seg.size_bytes || taken >= BATCHES_PER_READ_MAX {
            break;
        }
        next = Some(r.header(end).await?);
    }
    let data = r.range(start, end).await?;
    // Verify every batch before it leaves this function.
    let mut at = 0usize;
    while at < data.len() {
        let info =
            batch::verify(&data[at..]).map_err(|e| r.corrupt(start + at as u64, e.to_string()))?;
        at += info.size_bytes;
    }
    // One cache access per read: a hit when no byte of it had to wait for the store.
    sh.stats.record_cache(!r.missed);
    prefetch(sh, part, &r, seg, &manifest);
    let micros = started.elapsed().as_micros() as u64;
    add(&sh.stats.read_requests, 1);
    add(&sh.stats.read_bytes, data.len() as u64);
    add(&sh.stats.read_micros_total, micros);
    metrics::counter!(stats::READ_REQUESTS, "topic" => part.id.topic.clone()).increment(1);
    metrics::counter!(stats::READ_BYTES, "topic" => part.id.topic.clone())
        .increment(data.len() as u64);
    metrics::histogram!(stats::READ_DURATION).record(micros as f64 / 1e6);
    Ok(data)
}

/// If this read continues where the previous one ended, fetch the next chunks (and, at the
/// end of a segment, the next segment's index and first chunk) in the background.
fn prefetch(
    sh: &Arc<Shared>,
    part: &RemotePartition,
    r: &SegmentReader<'_>,
    seg: &RemoteSegment,
    manifest: &crate::manifest::PartitionManifest,
) {
    let Some(first) = r.first_chunk else { return };
    let sequential = {
        let mut last = part.last_read.lock();
        let seq = match &*last {
            Some((id, c)) if *id == r.id => first == *c || first == *c + 1,
            Some(_) => first == 0,
            None => false,
        };
        *last = Some((r.id.clone(), r.last_chunk));
        seq
    };
    if !sequential || sh.config.prefetch_chunks == 0 {
        return;
    }
    let cb = sh.config.chunk_bytes.max(1);
    let chunks_in_seg = seg.size_bytes.div_ceil(cb);
    let mut wanted: Vec<(RemoteSegment, u64)> = Vec::new();
    for n in r.last_chunk + 1..=r.last_chunk + sh.config.prefetch_chunks {
        if n < chunks_in_seg {
            wanted.push((seg.clone(), n));
        } else if let Some(next) = manifest.segment_after(seg.base_offset) {
            wanted.push((next.clone(), n - chunks_in_seg));
        }
    }
    for (s, n) in wanted {
        let id: Arc<str> = s.segment_id.as_str().into();
        if n >= s.size_bytes.div_ceil(cb) {
            continue;
        }
        let key: ChunkKey = (id.clone(), n);
        if sh.chunks.lock().contains(&key) || sh.in_flight.lock().contains_key(&key) {
            continue;
        }
        let Ok(permit) = sh.prefetch_permits.clone().try_acquire_owned() else {
            return; // enough prefetches in flight
        };
        let sh2 = sh.clone();
        let pid = part.id.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let Some(p) = sh2.partitions.lock().get(&pid).cloned() else {
                return;
            };
            if n == 0 {
                let _ = index(&sh2, &p, &s).await;
            }
            if let Err(e) = chunk(&sh2, &p, &s, &id, n).await {
                tracing::debug!(partition = %pid, chunk = n, error = %e, "prefetch failed");
            }
        });
    }
}

/// First record with timestamp >= `timestamp_ms` in remote data.
pub(crate) async fn offset_for_timestamp(
    sh: &Arc<Shared>,
    part: &RemotePartition,
    timestamp_ms: i64,
) -> Result<Option<(i64, i64)>> {
    let manifest = part.manifest();
    let start = manifest.log_start_offset;
    for seg in manifest
        .segments
        .iter()
        .filter(|s| s.max_timestamp_ms >= timestamp_ms)
    {
        let idx = index(sh, part, seg).await?;
        let mut r = SegmentReader::new(sh, part, seg);
        let mut position = idx.position_for_timestamp(timestamp_ms);
        for _ in 0..BATCHES_PER_READ_MAX {
            if position >= seg.size_bytes {
                break;
            }
            let h = r.header(position).await?;
            if h.max_timestamp_ms >= timestamp_ms && h.last_offset >= start {
                let data = r.range(position, position + h.size_bytes as u64).await?;
                batch::verify(&data).map_err(|e| r.corrupt(position, e.to_string()))?;
                let found = batch::first_record_at_or_after(&data, timestamp_ms)
                    .unwrap_or((h.base_offset, h.max_timestamp_ms));
                return Ok(Some((found.0.max(start), found.1)));
            }
            position += h.size_bytes as u64;
        }
    }
    Ok(None)
}
