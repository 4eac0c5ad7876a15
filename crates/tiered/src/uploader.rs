//! Uploading sealed segments, committing them to the manifest, deleting remote segments and
//! reconciling orphans.

use std::collections::HashSet;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart, path::Path};
use std::sync::atomic::Ordering;
use tokio::io::AsyncReadExt;

use crate::batch;
use crate::config::FailPoint;
use crate::error::{Result, TieredError};
use crate::layout::{MANIFEST_NAME, ObjectKind, new_segment_id, parse_segment_object_name};
use crate::local::LocalSegment;
use crate::manifest::{self, NO_LEADER_EPOCH, PartitionManifest, RemoteSegment};
use crate::remote_index::RemoteIndexBuilder;
use crate::stats::{self, add};
use crate::txn_index;
use crate::{RemotePartition, Shared};

/// Multipart parts in flight per upload (bounds memory to `upload_part_bytes` x this).
const MULTIPART_IN_FLIGHT_MAX: usize = 2;
/// Read buffer for streaming a local segment.
const READ_BUFFER_BYTES: usize = 256 << 10;
/// Companion files bigger than this are not uploaded (index files are preallocated by
/// size; a sealed one is trimmed, so this only trips on something unexpected).
const COMPANION_BYTES_MAX: u64 = 64 << 20;

pub(crate) async fn upload_and_commit(
    sh: &Shared,
    part: &RemotePartition,
    seg: &LocalSegment,
    now_ms: i64,
) -> Result<RemoteSegment> {
    let _permit = sh
        .upload_permits
        .acquire()
        .await
        .map_err(|_| TieredError::ShuttingDown)?;
    if part.claimed_epoch() == NO_LEADER_EPOCH {
        // Only the leader uploads (KIP-405); a follower's pass never gets here.
        return Err(TieredError::Fenced {
            stored: part.manifest().leader_epoch,
            ours: NO_LEADER_EPOCH,
        });
    }
    let from_offset = resume_offset(&part.manifest(), seg);
    let segment_id = new_segment_id();
    let mut written: Vec<Path> = Vec::new();
    let uploaded = match upload_objects(
        sh,
        part,
        seg,
        from_offset,
        &segment_id,
        now_ms,
        &mut written,
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            // Partial upload: remove what this attempt wrote (best effort; anything left is
            // an orphan the next start-up reconciles).
            for key in &written {
                let _ = sh.store.delete(key).await;
            }
            add(&sh.stats.upload_errors, 1);
            metrics::counter!(stats::UPLOAD_ERRORS, "topic" => part.id.topic.clone()).increment(1);
            return Err(e);
        }
    };
    if sh.config.fail_point == Some(FailPoint::CrashBeforeManifest) {
        tracing::error!(partition = %part.id, base_offset = seg.base_offset, "fail point crash-before-manifest: aborting");
        std::process::abort();
    }
    if let Err(e) = commit(sh, part, uploaded.clone()).await {
        if matches!(e, TieredError::Fenced { .. }) {
            // A newer leader owns the manifest: nothing names these objects, nor ever will.
            for key in &written {
                let _ = sh.store.delete(key).await;
            }
        }
        return Err(e);
    }
    add(&sh.stats.segments_uploaded, 1);
    add(&sh.stats.bytes_uploaded, uploaded.size_bytes);
    metrics::counter!(stats::SEGMENTS_UPLOADED, "topic" => part.id.topic.clone()).increment(1);
    metrics::counter!(stats::BYTES_UPLOADED, "topic" => part.id.topic.clone())
        .increment(uploaded.size_bytes);
    tracing::info!(partition = %part.id, base_offset = uploaded.base_offset, last_offset = uploaded.last_offset, size_bytes = uploaded.size_bytes, segment_id = %uploaded.segment_id, "segment uploaded to remote storage");
    Ok(uploaded)
}

/// Where an upload of `seg` starts: its first offset not yet remote. `None` uploads the whole
/// segment; `Some(offset)` only its batches from `offset` on (the segment straddles the remote
/// end: replicas roll segments at different offsets, so after a leader change the new leader's
/// segment may begin below the old leader's last upload).
pub(crate) fn resume_offset(m: &PartitionManifest, seg: &LocalSegment) -> Option<i64> {
    let next = m.next_offset()?;
    (seg.base_offset < next && next < seg.next_base_offset).then_some(next)
}

/// Put every object of the segment (from `from_offset` on, if given); returns the manifest
/// entry (not yet committed).
async fn upload_objects(
    sh: &Shared,
    part: &RemotePartition,
    seg: &LocalSegment,
    from_offset: Option<i64>,
    segment_id: &str,
    now_ms: i64,
    written: &mut Vec<Path>,
) -> Result<RemoteSegment> {
    // A partial segment is named, and recorded, by its first uploaded offset: readers build
    // object keys from the manifest's base offset.
    let object_base = from_offset.unwrap_or(seg.base_offset);
    let key = |kind| {
        sh.layout
            .segment_object(&part.id, object_base, segment_id, kind)
    };
    let log_key = key(ObjectKind::Log);
    written.push(log_key.clone());
    let scanned = upload_log(sh, seg, from_offset, &log_key).await?;
    let index_key = key(ObjectKind::RemoteIndex);
    written.push(index_key.clone());
    let index = scanned.index.encode();
    sh.config
        .retry
        .run("put remote index", || {
            let p = PutPayload::from(index.clone());
            async { Ok(sh.store.put(&index_key, p).await.map(|_| ())?) }
        })
        .await?;
    let mut objects = vec![ObjectKind::Log, ObjectKind::RemoteIndex];
    let mut producer_snapshot_offset = None;
    // A partial segment's local index files point at the whole file's positions: not uploaded
    // (reads use the remote index, built over what was uploaded).
    let companions: &[ObjectKind] = if from_offset.is_some() {
        &[
            ObjectKind::ProducerSnapshot,
            ObjectKind::LeaderEpochCheckpoint,
        ]
    } else {
        &[
            ObjectKind::OffsetIndex,
            ObjectKind::TimeIndex,
            ObjectKind::ProducerSnapshot,
            ObjectKind::LeaderEpochCheckpoint,
        ]
    };
    for &kind in companions {
        let Some(path) = seg.companion(kind) else {
            continue;
        };
        let data = match tokio::fs::metadata(&path).await {
            Ok(m) if m.len() <= COMPANION_BYTES_MAX => match tokio::fs::read(&path).await {
                Ok(d) => Bytes::from(d),
                Err(_) => continue, // deleted meanwhile: optional
            },
            _ => continue,
        };
        let k = key(kind);
        written.push(k.clone());
        sh.config
            .retry
            .run("put companion", || {
                let p = PutPayload::from(data.clone());
                async { Ok(sh.store.put(&k, p).await.map(|_| ())?) }
            })
            .await?;
        objects.push(kind);
        if kind == ObjectKind::ProducerSnapshot {
            producer_snapshot_offset = Some(seg.next_base_offset);
        }
    }
    let aborted = txn_index::upload(
        sh,
        seg,
        from_offset,
        scanned.last_offset,
        key(ObjectKind::TxnIndex),
        written,
    )
    .await?;
    if aborted > 0 {
        objects.push(ObjectKind::TxnIndex);
    }
    Ok(RemoteSegment {
        segment_id: segment_id.to_string(),
        base_offset: match from_offset {
            Some(from) => from,
            None => scanned.base_offset.unwrap_or(seg.base_offset),
        },
        last_offset: scanned.last_offset,
        size_bytes: scanned.size_bytes,
        max_timestamp_ms: scanned.max_timestamp_ms,
        max_timestamp_offset: scanned.max_timestamp_offset,
        batch_count: scanned.batch_count,
        objects,
        uploaded_at_ms: now_ms,
        txn_index_entries: Some(aborted),
        producer_snapshot_offset,
    })
}

struct Scanned {
    index: crate::remote_index::RemoteIndex,
    base_offset: Option<i64>,
    last_offset: i64,
    size_bytes: u64,
    max_timestamp_ms: i64,
    max_timestamp_offset: i64,
    batch_count: u64,
}

/// Stream the `.log` file to the store while checking every batch's CRC and building the
/// remote index. Small segments go up in one PUT, large ones as a multipart upload with
/// bounded parts in flight (aborted on failure, so no partial object remains).
async fn upload_log(
    sh: &Shared,
    seg: &LocalSegment,
    from_offset: Option<i64>,
    key: &Path,
) -> Result<Scanned> {
    let from_offset = from_offset.unwrap_or(i64::MIN);
    let path_str = seg.log_path.display().to_string();
    let io = |e: std::io::Error| TieredError::LocalIo {
        path: path_str.clone(),
        source: e,
    };
    let file = tokio::fs::File::open(&seg.log_path).await.map_err(io)?;
    let size_bytes = file.metadata().await.map_err(io)?.len();
    let mut reader = tokio::io::BufReader::with_capacity(READ_BUFFER_BYTES, file);
    let part_bytes = sh.config.upload_part_bytes.max(5 << 20);
    let mut multipart: Option<WriteMultipart> = None;
    let mut buf = BytesMut::with_capacity((size_bytes as usize).min(part_bytes));
    let mut builder = RemoteIndexBuilder::new(sh.config.index_interval_bytes);
    let mut s = Scanned {
        index: Default::default(),
        base_offset: None,
        last_offset: seg.base_offset - 1,
        size_bytes,
        max_timestamp_ms: -1,
        max_timestamp_offset: -1,
        batch_count: 0,
    };
    let mut position = 0u64;
    // Where the next kept batch goes in the object (batches below `from_offset` are skipped).
    let mut object_position = 0u64;
    let result: Result<()> = async {
        while position < size_bytes {
            let batch_position = position;
            let corrupt = |reason: String| TieredError::LocalCorrupt {
                path: path_str.clone(),
                position: batch_position,
                reason,
            };
            let start = buf.len();
            buf.resize(start + batch::LOG_OVERHEAD_BYTES, 0);
            reader.read_exact(&mut buf[start..]).await.map_err(io)?;
            let size = batch::batch_size(&buf[start..]).map_err(|e| corrupt(e.to_string()))?;
            if position + size as u64 > size_bytes {
                return Err(corrupt("batch runs past the end of the segment".into()));
            }
            buf.resize(start + size, 0);
            reader
                .read_exact(&mut buf[start + batch::LOG_OVERHEAD_BYTES..])
                .await
                .map_err(io)?;
            let info = batch::verify(&buf[start..]).map_err(|e| corrupt(e.to_string()))?;
            position += size as u64;
            if info.last_offset < from_offset {
                buf.truncate(start); // already remote
                continue;
            }
            if info.base_offset < from_offset {
                return Err(corrupt(format!(
                    "batch {}..={} straddles the remote end {from_offset}",
                    info.base_offset, info.last_offset
                )));
            }
            if info.base_offset <= s.last_offset && s.batch_count > 0 {
                return Err(corrupt(format!(
                    "offset {} does not follow {}",
                    info.base_offset, s.last_offset
                )));
            }
            builder.add(&info, object_position);
            object_position += size as u64;
            s.base_offset.get_or_insert(info.base_offset);
            s.last_offset = info.last_offset;
            s.batch_count += 1;
            if info.max_timestamp_ms > s.max_timestamp_ms {
                s.max_timestamp_ms = info.max_timestamp_ms;
                s.max_timestamp_offset = info.last_offset;
            }
            if buf.len() >= part_bytes && size_bytes > part_bytes as u64 {
                let mp = match &mut multipart {
                    Some(mp) => mp,
                    None => {
                        let upload = sh.store.put_multipart(key).await?;
                        multipart.insert(WriteMultipart::new_with_chunk_size(upload, part_bytes))
                    }
                };
                mp.wait_for_capacity(MULTIPART_IN_FLIGHT_MAX).await?;
                mp.put(buf.split().freeze());
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        if let Some(mp) = multipart {
            let _ = mp.abort().await;
        }
        return Err(e);
    }
    if s.batch_count == 0 {
        return Err(TieredError::LocalCorrupt {
            path: path_str,
            position: 0,
            reason: "sealed segment holds no batches".into(),
        });
    }
    match multipart {
        Some(mut mp) => {
            if !buf.is_empty() {
                mp.put(buf.split().freeze());
            }
            if let Err(e) = mp.finish().await {
                return Err(e.into());
            }
        }
        None => {
            let data = buf.freeze();
            sh.config
                .retry
                .run("put segment", || {
                    let p = PutPayload::from(data.clone());
                    async { Ok(sh.store.put(key, p).await.map(|_| ())?) }
                })
                .await?;
        }
    }
    s.index = builder.finish();
    s.size_bytes = object_position;
    Ok(s)
}

/// Append an uploaded segment to the manifest (one atomic PUT, retried).
async fn commit(sh: &Shared, part: &RemotePartition, seg: RemoteSegment) -> Result<()> {
    let _w = part.writer.lock().await;
    let mut m = (*part.manifest()).clone();
    if let Some(last) = m.segments.last()
        && seg.base_offset <= last.last_offset
    {
        return Err(TieredError::BadMetadata {
            key: sh.layout.manifest(&part.id).to_string(),
            reason: format!(
                "segment at {} overlaps remote data ending at {}",
                seg.base_offset, last.last_offset
            ),
        });
    }
    if m.segments.is_empty() {
        m.log_start_offset = m.log_start_offset.max(seg.base_offset);
    }
    m.segments.push(seg);
    m.generation += 1;
    write_manifest(sh, part, m).await
}

/// Store `m` under this broker's claimed leader epoch, unless a newer leader claimed the
/// manifest since (then `Fenced`, and nothing is written).
///
/// The check is a GET before the PUT, not a conditional PUT (`object_store`'s local-directory
/// store has no compare-and-swap), so a deposed leader that passed its check just before the
/// new leader's claim can still land one write. That write cannot hide data: the new leader
/// writes from its own copy (claimed after loading the stored manifest), so its next write
/// replaces it, and the deposed leader's objects it named are then orphans, which the next
/// leader change or restart reconciles.
async fn write_manifest(
    sh: &Shared,
    part: &RemotePartition,
    mut m: PartitionManifest,
) -> Result<()> {
    let ours = part.claimed_epoch();
    let key = sh.layout.manifest(&part.id);
    let stored = sh
        .config
        .retry
        .run("load manifest", || manifest::load(sh.store.as_ref(), &key))
        .await?;
    let stored_epoch = stored.map_or(NO_LEADER_EPOCH, |s| s.leader_epoch);
    if !may_write(ours, stored_epoch) {
        tracing::warn!(partition = %part.id, ours, stored = stored_epoch, "remote manifest claimed by a newer leader; not written");
        return Err(TieredError::Fenced {
            stored: stored_epoch,
            ours,
        });
    }
    m.leader_epoch = ours;
    sh.config
        .retry
        .run("put manifest", || {
            manifest::store(sh.store.as_ref(), &key, &m)
        })
        .await?;
    part.set_manifest(m);
    Ok(())
}

/// Whether a broker that claimed the manifest under `ours` may overwrite one stored by
/// `stored`: only the leader writes (a follower has no claim), and never over a newer leader.
pub(crate) fn may_write(ours: i32, stored: i32) -> bool {
    ours != NO_LEADER_EPOCH && ours >= stored
}

pub(crate) async fn take_leadership(
    sh: &Shared,
    part: &RemotePartition,
    leader_epoch: i32,
) -> Result<()> {
    let r = claim(sh, part, leader_epoch).await;
    if r.is_err() {
        // The leader cannot upload until it holds the manifest: an upload error for metrics.
        add(&sh.stats.upload_errors, 1);
        metrics::counter!(stats::UPLOAD_ERRORS, "topic" => part.id.topic.clone()).increment(1);
    }
    r
}

async fn claim(sh: &Shared, part: &RemotePartition, leader_epoch: i32) -> Result<()> {
    let _w = part.writer.lock().await;
    let key = sh.layout.manifest(&part.id);
    let stored = sh
        .config
        .retry
        .run("load manifest", || manifest::load(sh.store.as_ref(), &key))
        .await?
        .unwrap_or_else(|| PartitionManifest::empty(&part.id));
    if !may_write(leader_epoch, stored.leader_epoch) {
        return Err(TieredError::Fenced {
            stored: stored.leader_epoch,
            ours: leader_epoch,
        });
    }
    let resume = stored.next_offset();
    let generation = stored.generation;
    part.set_manifest(stored);
    reconcile(sh, part).await?;
    part.claimed_epoch.store(leader_epoch, Ordering::Release);
    let mut m = (*part.manifest()).clone();
    m.generation = generation + 1;
    if let Err(e) = write_manifest(sh, part, m).await {
        part.claimed_epoch.store(NO_LEADER_EPOCH, Ordering::Release);
        return Err(e);
    }
    tracing::info!(partition = %part.id, leader_epoch, resume_offset = ?resume, "remote manifest claimed by this leader; uploads resume at its end");
    Ok(())
}

pub(crate) async fn follow(sh: &Shared, part: &RemotePartition) -> Result<bool> {
    let _w = part.writer.lock().await;
    part.claimed_epoch.store(NO_LEADER_EPOCH, Ordering::Release);
    let key = sh.layout.manifest(&part.id);
    let Some(stored) = manifest::load(sh.store.as_ref(), &key).await? else {
        return Ok(false);
    };
    let changed = *part.manifest() != stored;
    if changed {
        part.set_manifest(stored);
    }
    Ok(changed)
}

pub(crate) async fn delete_before(
    sh: &Shared,
    part: &RemotePartition,
    offset: i64,
) -> Result<usize> {
    let _w = part.writer.lock().await;
    let mut m = (*part.manifest()).clone();
    if offset <= m.log_start_offset {
        return Ok(0);
    }
    let keep_from = m.segments.partition_point(|s| s.last_offset < offset);
    let removed: Vec<RemoteSegment> = m.segments.drain(..keep_from).collect();
    m.log_start_offset = offset;
    m.generation += 1;
    // Readers stop seeing the segments first; then the objects go.
    write_manifest(sh, part, m).await?;
    for seg in &removed {
        delete_segment_objects(sh, part, seg).await;
    }
    add(&sh.stats.segments_deleted, removed.len() as u64);
    metrics::counter!(stats::SEGMENTS_DELETED, "topic" => part.id.topic.clone())
        .increment(removed.len() as u64);
    if !removed.is_empty() {
        tracing::info!(partition = %part.id, segments = removed.len(), log_start_offset = offset, "remote segments deleted");
    }
    Ok(removed.len())
}

pub(crate) async fn delete_all(sh: &Shared, part: &RemotePartition) -> Result<()> {
    let _w = part.writer.lock().await;
    let prefix = sh.layout.partition_prefix(&part.id);
    let keys: Vec<Path> = sh
        .store
        .list(Some(&prefix))
        .map(|r| r.map(|m| m.location))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    // The manifest goes first so a crash midway leaves only orphans.
    let manifest_key = sh.layout.manifest(&part.id);
    match sh.store.delete(&manifest_key).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    for k in keys.iter().filter(|k| **k != manifest_key) {
        let _ = sh.store.delete(k).await;
    }
    part.set_manifest(PartitionManifest::empty(&part.id));
    Ok(())
}

async fn delete_segment_objects(sh: &Shared, part: &RemotePartition, seg: &RemoteSegment) {
    for kind in &seg.objects {
        let key = sh
            .layout
            .segment_object(&part.id, seg.base_offset, &seg.segment_id, *kind);
        let r = sh
            .config
            .retry
            .run("delete object", || async {
                match sh.store.delete(&key).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            })
            .await;
        if let Err(e) = r {
            // Unreferenced now; the next start-up's reconcile removes it.
            tracing::warn!(key = %key, error = %e, "could not delete remote object; left as orphan");
        }
    }
    let id: std::sync::Arc<str> = seg.segment_id.as_str().into();
    sh.chunks.lock().retain(|k| k.0 != id);
    sh.indexes.lock().remove(&id);
    sh.txn_indexes.lock().remove(&id);
}

/// Delete objects under the partition's prefix that the manifest does not name.
pub(crate) async fn reconcile(sh: &Shared, part: &RemotePartition) -> Result<usize> {
    let m = part.manifest();
    let live: HashSet<&str> = m.segments.iter().map(|s| s.segment_id.as_str()).collect();
    let prefix = sh.layout.partition_prefix(&part.id);
    let listed: Vec<_> = sh
        .store
        .list(Some(&prefix))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let mut deleted = 0;
    for meta in listed {
        let Some(name) = meta.location.filename() else {
            continue;
        };
        if name == MANIFEST_NAME {
            continue;
        }
        let orphan = match parse_segment_object_name(name) {
            Some((_, id, _)) => !live.contains(id),
            None => false, // not ours: leave it alone
        };
        if orphan {
            match sh.store.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }
    if deleted > 0 {
        add(&sh.stats.orphans_deleted, deleted as u64);
        tracing::warn!(partition = %part.id, objects = deleted, "deleted orphaned remote objects left by an interrupted upload or delete");
    }
    Ok(deleted)
}

/// GET the producer snapshot uploaded with `seg` (bounded in size).
pub(crate) async fn get_producer_snapshot(
    sh: &Shared,
    part: &RemotePartition,
    seg: &RemoteSegment,
) -> Result<Bytes> {
    let key = sh.layout.segment_object(
        &part.id,
        seg.base_offset,
        &seg.segment_id,
        ObjectKind::ProducerSnapshot,
    );
    sh.config
        .retry
        .run("get producer snapshot", || async {
            let r = sh.store.get(&key).await?;
            if r.meta.size > COMPANION_BYTES_MAX {
                return Err(TieredError::BadMetadata {
                    key: key.to_string(),
                    reason: format!("{} bytes exceeds {COMPANION_BYTES_MAX}", r.meta.size),
                });
            }
            Ok(r.bytes().await?)
        })
        .await
}
