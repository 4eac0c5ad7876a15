//! The same end-to-end suite against a real S3-compatible server (`moto_server`, started
//! here on a free loopback port; no mock of the S3 API) and against the local-directory
//! store. Store outages are made at the transport (a TCP proxy we stop) or the filesystem
//! (the directory replaced by a file), never by faking responses.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::TierRole;
use crate::batch::fixture::make_batch;
use crate::local::list_segments;
use crate::retry::RetryPolicy;
use crate::tiering::{LocalLog, TierPolicy, TieringManager};
use crate::{PartitionId, TieredConfig, TieredError, TieredStorage};

const SEGMENTS_SEALED: usize = 5;
const BATCHES_PER_SEGMENT: usize = 20;
const RECORDS_PER_BATCH: i32 = 5;
const BASE_TS: i64 = 1_000_000;

/// A partition directory managed the way the log crate lays it out.
pub(crate) struct DirLog {
    pub(crate) dir: PathBuf,
    pub(crate) start: AtomicI64,
    pub(crate) role: parking_lot::Mutex<TierRole>,
    pub(crate) high_watermark: AtomicI64,
}

impl DirLog {
    /// The sole replica: leader in epoch 0, everything committed.
    pub(crate) fn leader(dir: PathBuf) -> DirLog {
        DirLog {
            dir,
            start: AtomicI64::new(0),
            role: parking_lot::Mutex::new(TierRole::Leader { leader_epoch: 0 }),
            high_watermark: AtomicI64::new(i64::MAX),
        }
    }
}

impl LocalLog for DirLog {
    fn dir(&self) -> PathBuf {
        self.dir.clone()
    }
    fn local_log_start_offset(&self) -> i64 {
        self.start.load(Ordering::SeqCst)
    }
    fn delete_local_before(&self, offset: i64) -> Result<(), String> {
        let segs = list_segments(&self.dir).map_err(|e| e.to_string())?;
        for w in segs.windows(2) {
            if w[1].0 <= offset {
                std::fs::remove_file(&w[0].1).map_err(|e| e.to_string())?;
                let _ = std::fs::remove_file(self.dir.join(format!("{:020}.index", w[0].0)));
            }
        }
        self.start.store(offset, Ordering::SeqCst);
        Ok(())
    }
    fn tier_role(&self) -> TierRole {
        *self.role.lock()
    }
    fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::SeqCst)
    }
}

/// Writes 5 sealed segments + an active one; returns the bytes of the sealed ones.
pub(crate) fn write_partition(dir: &FsPath) -> Vec<u8> {
    let mut sealed = Vec::new();
    let mut offset = 0i64;
    let mut g = 0i64;
    for s in 0..=SEGMENTS_SEALED {
        let base = offset;
        let mut seg = Vec::new();
        for _ in 0..BATCHES_PER_SEGMENT {
            seg.extend(make_batch(
                offset,
                RECORDS_PER_BATCH,
                BASE_TS + g * 10,
                200 + (g as usize % 7) * 31,
            ));
            offset += i64::from(RECORDS_PER_BATCH);
            g += 1;
        }
        std::fs::write(dir.join(format!("{base:020}.log")), &seg).unwrap();
        std::fs::write(dir.join(format!("{base:020}.index")), base.to_be_bytes()).unwrap();
        if s < SEGMENTS_SEALED {
            sealed.extend(seg);
        }
    }
    sealed
}

pub(crate) fn test_config() -> TieredConfig {
    TieredConfig {
        chunk_bytes: 8192,
        cache_bytes: 64 << 10,
        index_interval_bytes: 2048,
        prefix: "cold".into(),
        request_timeout_ms: 3_000,
        retry: RetryPolicy {
            initial_backoff_ms: 5,
            max_backoff_ms: 50,
            attempts_max: 3,
        },
        ..TieredConfig::default()
    }
}

trait Backend {
    fn store(&self) -> Arc<dyn ObjectStore>;
    fn set_available(&mut self, up: bool);
}

pub(crate) async fn read_all(
    storage: &TieredStorage,
    part: &crate::RemotePartition,
    from: i64,
    until: i64,
) -> Result<Vec<u8>, TieredError> {
    let mut out = Vec::new();
    let mut offset = from;
    for _ in 0..100_000 {
        if offset >= until {
            return Ok(out);
        }
        let b = storage.read(part, offset, 10_000, i64::MAX, true).await?;
        assert!(!b.is_empty());
        let mut at = 0;
        while at < b.len() {
            let info = crate::batch::verify(&b[at..]).expect("served batches verify");
            offset = info.last_offset + 1;
            at += info.size_bytes;
        }
        out.extend_from_slice(&b);
    }
    panic!("read loop did not finish");
}

async fn suite(backend: &mut dyn Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    std::fs::create_dir_all(&dir).unwrap();
    let sealed = write_partition(&dir);
    let remote_end = (SEGMENTS_SEALED * BATCHES_PER_SEGMENT) as i64 * i64::from(RECORDS_PER_BATCH);
    let id = PartitionId::new("orders", "q1w2e3", 0);
    let log = Arc::new(DirLog::leader(dir.clone()));
    let policy = TierPolicy {
        remote_storage_enable: true,
        local_retention_ms: -1,
        local_retention_bytes: 0,
        retention_ms: -1,
        retention_bytes: -1,
    };
    let storage = TieredStorage::with_store(test_config(), backend.store());
    let mgr = TieringManager::new(storage.clone());
    let part = mgr.register(id.clone(), log.clone(), policy).await.unwrap();
    assert!(part.manifest().segments.is_empty());

    // Store down: nothing uploads, nothing local is deleted.
    backend.set_available(false);
    mgr.run_once(BASE_TS).await;
    assert!(part.manifest().segments.is_empty());
    assert_eq!(list_segments(&dir).unwrap().len(), SEGMENTS_SEALED + 1);
    assert!(storage.stats().upload_errors > 0);
    assert_eq!(mgr.sizes()[0].upload_lag_bytes, sealed.len() as u64);

    // Store back: uploads resume, then local retention deletes the uploaded copies.
    backend.set_available(true);
    mgr.run_once(BASE_TS).await;
    let m = part.manifest();
    assert_eq!(m.segments.len(), SEGMENTS_SEALED);
    assert_eq!(m.next_offset(), Some(remote_end));
    assert_eq!(m.start_offset(), Some(0));
    assert_eq!(
        list_segments(&dir).unwrap().len(),
        1,
        "only the active segment stays local"
    );
    assert_eq!(log.local_log_start_offset(), remote_end);
    assert_eq!(mgr.log_start_offset("orders", 0, remote_end), 0);
    let store = backend.store();
    let listed: Vec<String> = store
        .list(Some(&storage.layout().partition_prefix(&id)))
        .map(|m| m.unwrap().location.to_string())
        .collect()
        .await;
    assert!(listed.contains(&"cold/orders-q1w2e3/0/manifest.json".to_string()));
    for s in &m.segments {
        for suffix in ["log", "rindex", "index"] {
            let k = format!(
                "cold/orders-q1w2e3/0/{:020}.{}.{suffix}",
                s.base_offset, s.segment_id
            );
            assert!(listed.contains(&k), "{k} missing in {listed:?}");
        }
    }
    assert_eq!(listed.len(), 1 + 3 * SEGMENTS_SEALED);

    // Byte-for-byte reads from offset 0, through the chunk cache.
    assert_eq!(
        read_all(&storage, &part, 0, remote_end).await.unwrap(),
        sealed
    );
    let s1 = storage.stats();
    assert!(s1.cache_hits > 0 && s1.cache_misses > 0);
    // Mid-batch offsets return the whole containing batch; max_offset bounds the read.
    let b = storage.read(&part, 7, 1, i64::MAX, true).await.unwrap();
    assert_eq!(crate::batch::verify(&b).unwrap().base_offset, 5);
    let b = storage.read(&part, 0, usize::MAX, 10, true).await.unwrap();
    let first = crate::batch::verify(&b).unwrap();
    assert_eq!(
        crate::batch::verify(&b[first.size_bytes..])
            .unwrap()
            .base_offset,
        5
    );
    assert_eq!(
        b.len(),
        first.size_bytes
            + crate::batch::verify(&b[first.size_bytes..])
                .unwrap()
                .size_bytes
    );
    assert!(matches!(
        storage.read(&part, remote_end, 100, i64::MAX, true).await,
        Err(TieredError::OffsetNotRemote { .. })
    ));
    // ListOffsets by time over remote data: record level.
    let ts = BASE_TS + 37 * 10 + 3;
    assert_eq!(
        storage.offset_for_timestamp(&part, ts).await.unwrap(),
        Some((37 * 5 + 3, ts))
    );
    assert_eq!(
        storage.offset_for_timestamp(&part, 0).await.unwrap(),
        Some((0, BASE_TS))
    );
    assert_eq!(
        storage.offset_for_timestamp(&part, i64::MAX).await.unwrap(),
        None
    );

    // Restart: a new service finds the same manifest and serves the same bytes.
    let storage2 = TieredStorage::with_store(test_config(), backend.store());
    let part2 = storage2.open_partition(id.clone()).await.unwrap();
    assert_eq!(*part2.manifest(), *m);
    assert_eq!(
        read_all(&storage2, &part2, 0, remote_end).await.unwrap(),
        sealed
    );

    // An upload interrupted before its manifest update leaves objects no reader sees; the
    // next leader (here: the same broker after a restart) deletes them when it takes over.
    let orphan =
        storage
            .layout()
            .segment_object(&id, remote_end, "deadbeef", crate::ObjectKind::Log);
    store
        .put(&orphan, PutPayload::from_static(b"partial"))
        .await
        .unwrap();
    let storage3 = TieredStorage::with_store(test_config(), backend.store());
    let part3 = storage3.open_partition(id.clone()).await.unwrap();
    storage3.take_leadership(&part3, 0).await.unwrap();
    assert!(matches!(
        store.head(&orphan).await,
        Err(object_store::Error::NotFound { .. })
    ));
    assert_eq!(storage3.stats().orphans_deleted, 1);
    assert_eq!(part3.manifest().segments, m.segments);

    // A corrupted remote object is detected by CRC and reported, never served.
    let victim = &m.segments[2];
    let key = storage.layout().segment_object(
        &id,
        victim.base_offset,
        &victim.segment_id,
        crate::ObjectKind::Log,
    );
    let mut bytes = store
        .get(&key)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let flip_at = bytes.len() / 2;
    bytes[flip_at] ^= 0x55;
    store.put(&key, PutPayload::from(bytes)).await.unwrap();
    let storage4 = TieredStorage::with_store(test_config(), backend.store());
    let part4 = storage4.open_partition(id.clone()).await.unwrap();
    let err = read_all(&storage4, &part4, victim.base_offset, victim.next_offset())
        .await
        .unwrap_err();
    assert!(matches!(err, TieredError::RemoteCorrupt { .. }), "{err}");
    assert_eq!(err.kafka_code(), 56);
    assert!(storage4.stats().corrupt_batches >= 1);
    // Other segments still read fine.
    let s0 = &m.segments[0];
    read_all(&storage4, &part4, s0.base_offset, s0.next_offset())
        .await
        .unwrap();

    // Total retention deletes remote segments (manifest first, then objects).
    let policy = TierPolicy {
        retention_bytes: 3 * m.segments[0].size_bytes as i64,
        ..policy
    };
    mgr.update_policy("orders", policy);
    mgr.run_once(BASE_TS).await;
    let after = part.manifest();
    assert!(
        after.segments.len() < SEGMENTS_SEALED,
        "{}",
        after.segments.len()
    );
    assert_eq!(
        after.log_start_offset,
        after
            .segments
            .first()
            .map(|s| s.base_offset)
            .unwrap_or(remote_end)
    );
    let gone = &m.segments[0];
    let k = storage.layout().segment_object(
        &id,
        gone.base_offset,
        &gone.segment_id,
        crate::ObjectKind::Log,
    );
    assert!(matches!(
        store.head(&k).await,
        Err(object_store::Error::NotFound { .. })
    ));
    assert!(matches!(
        storage.read(&part, 0, 100, i64::MAX, true).await,
        Err(TieredError::OffsetNotRemote { .. })
    ));
    assert!(storage.stats().segments_deleted > 0);
}

// ---------- local directory backend ----------

struct LocalBackend {
    root: PathBuf,
    store: Arc<dyn ObjectStore>,
}

impl Backend for LocalBackend {
    fn store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }
    fn set_available(&mut self, up: bool) {
        let aside = self.root.with_extension("aside");
        if up {
            std::fs::remove_file(&self.root).unwrap();
            std::fs::rename(&aside, &self.root).unwrap();
        } else {
            std::fs::rename(&self.root, &aside).unwrap();
            std::fs::write(&self.root, b"store unavailable").unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_against_local_directory_store() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let config = TieredConfig {
        store: crate::StoreSpec::Local { path: root.clone() },
        ..test_config()
    };
    let store = crate::build_store(&config).unwrap();
    let mut b = LocalBackend { root, store };
    tokio::time::timeout(Duration::from_secs(120), suite(&mut b))
        .await
        .unwrap();
}

// ---------- S3 (moto_server) backend ----------

struct Moto {
    child: std::process::Child,
    port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_moto() -> Moto {
    // $MOTO_SERVER, else the repository's CI venv (.ci/run installs moto there), else PATH.
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.venv/bin/moto_server");
    let bin = std::env::var("MOTO_SERVER").unwrap_or_else(|_| {
        if std::path::Path::new(venv).exists() {
            venv.to_string()
        } else {
            "moto_server".to_string()
        }
    });
    for _ in 0..5 {
        let port = free_port();
        let child = std::process::Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {bin} (pip install 'moto[server]'): {e}"));
        let mut moto = Moto { child, port };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return moto;
            }
            if let Ok(Some(_)) = moto.child.try_wait() {
                break; // port taken meanwhile: try another
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = moto.child.kill();
    }
    panic!("moto_server did not start");
}

/// `PUT /bucket` (moto accepts it unsigned).
fn create_bucket(port: u16, bucket: &str) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    assert!(
        resp.starts_with("HTTP/1.1 200") || resp.starts_with("HTTP/1.0 200"),
        "{resp}"
    );
}

/// A loopback TCP proxy whose connections can be cut: the store "goes away" for the client.
struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    conns: Arc<parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(target: u16) -> Proxy {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let conns: Arc<parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>> = Default::default();
        let (up2, conns2) = (up.clone(), conns.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = l.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: connection refused-like
                }
                let h = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                conns2.lock().push(h);
            }
        });
        Proxy { port, up, conns }
    }
}

struct S3Backend {
    store: Arc<dyn ObjectStore>,
    proxy: Proxy,
    _moto: Moto,
}

impl Backend for S3Backend {
    fn store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }
    fn set_available(&mut self, up: bool) {
        self.proxy.up.store(up, Ordering::SeqCst);
        if !up {
            for h in self.proxy.conns.lock().drain(..) {
                h.abort();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_against_s3_compatible_server() {
    let moto = start_moto();
    create_bucket(moto.port, "streamforge-cold");
    let proxy = Proxy::start(moto.port).await;
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("streamforge-cold")
        .with_endpoint(format!("http://127.0.0.1:{}", proxy.port))
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_retry(object_store::RetryConfig {
            max_retries: 1,
            retry_timeout: Duration::from_secs(2),
            backoff: Default::default(),
        })
        .with_client_options(
            object_store::ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(Duration::from_secs(5))
                .with_connect_timeout(Duration::from_secs(1)),
        )
        .build()
        .unwrap();
    let mut b = S3Backend {
        store: Arc::new(store),
        proxy,
        _moto: moto,
    };
    tokio::time::timeout(Duration::from_secs(180), suite(&mut b))
        .await
        .unwrap();
}
