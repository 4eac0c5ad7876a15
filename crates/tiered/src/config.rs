//! Where remote segments go and how hard we try: flags/env (`TieredArgs`), the resolved
//! `TieredConfig` (also loadable from TOML), and building the `object_store` client.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::{BackoffConfig, ClientOptions, RetryConfig};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TieredError};
use crate::retry::RetryPolicy;

/// Command-line flags (and env vars) for remote storage; flatten into the broker's flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TieredArgs {
    /// Remote storage URL: file:///path, s3://bucket[/prefix], gs://bucket[/prefix],
    /// az://container[/prefix]. Default: a `remote-storage` directory under the data dir.
    #[arg(long, env = "STREAMFORGE_REMOTE_STORAGE")]
    pub remote_storage: Option<String>,
    /// S3-compatible endpoint (MinIO, Ceph, moto), e.g. http://127.0.0.1:9000.
    #[arg(long, env = "STREAMFORGE_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 bucket (credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).
    #[arg(long, env = "STREAMFORGE_S3_BUCKET")]
    pub s3_bucket: Option<String>,
    /// S3 region (also AWS_REGION / AWS_DEFAULT_REGION).
    #[arg(long, env = "STREAMFORGE_S3_REGION")]
    pub s3_region: Option<String>,
    /// Path-style addressing (`endpoint/bucket/key`), as MinIO and most S3-compatible
    /// servers need. Default: on when --s3-endpoint is given, off for AWS.
    #[arg(long, env = "STREAMFORGE_S3_PATH_STYLE")]
    pub s3_path_style: Option<bool>,
    /// Key prefix inside the bucket.
    #[arg(long, env = "STREAMFORGE_REMOTE_PREFIX")]
    pub remote_prefix: Option<String>,
    /// Bytes of remote segment data cached in memory.
    #[arg(long, env = "STREAMFORGE_REMOTE_CACHE_BYTES")]
    pub remote_cache_bytes: Option<u64>,
    /// Size of one ranged GET (and cache entry).
    #[arg(long, env = "STREAMFORGE_REMOTE_CHUNK_BYTES")]
    pub remote_chunk_bytes: Option<u64>,
    /// Segments uploaded at the same time (across partitions).
    #[arg(long, env = "STREAMFORGE_REMOTE_UPLOAD_CONCURRENCY")]
    pub remote_upload_concurrency: Option<usize>,
    /// How often each tiered partition is checked for sealed segments and retention.
    #[arg(long, env = "STREAMFORGE_REMOTE_TASK_INTERVAL_MS")]
    pub remote_task_interval_ms: Option<u64>,
}

/// Which object store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoreSpec {
    /// A local directory (the embedded default).
    Local {
        path: PathBuf,
    },
    /// S3 or an S3-compatible server.
    S3 {
        bucket: String,
        endpoint: Option<String>,
        region: Option<String>,
        path_style: bool,
    },
    Gcs {
        bucket: String,
    },
    Azure {
        container: String,
    },
}

/// Test-only crash points (set with `STREAMFORGE_TIERED_FAILPOINT`), used by the fault
/// tests to kill the broker at the exact step a real crash could hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailPoint {
    /// Abort the process after a segment's objects are uploaded, before the manifest update.
    CrashBeforeManifest,
}

impl FailPoint {
    pub fn from_env() -> Option<FailPoint> {
        match std::env::var("STREAMFORGE_TIERED_FAILPOINT").ok()?.as_str() {
            "crash-before-manifest" => Some(FailPoint::CrashBeforeManifest),
            _ => None,
        }
    }
}

/// Resolved tiered-storage settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TieredConfig {
    pub store: StoreSpec,
    /// Key prefix inside the bucket/directory.
    pub prefix: String,
    /// Bytes per ranged GET and cache entry.
    pub chunk_bytes: u64,
    /// Bytes of chunks (plus remote indexes) cached in memory.
    pub cache_bytes: u64,
    /// Chunks fetched ahead of a sequential reader.
    pub prefetch_chunks: u64,
    /// Background prefetches in flight at once (across partitions).
    pub prefetch_in_flight_max: usize,
    /// Segments uploaded concurrently.
    pub upload_concurrency: usize,
    /// Multipart part size for large segments (objects below it are one PUT).
    pub upload_part_bytes: usize,
    /// Bytes of batches between two remote index entries.
    pub index_interval_bytes: u64,
    /// How often the tiering task visits each partition.
    pub task_interval_ms: u64,
    /// Per-request timeout given to the object store client.
    pub request_timeout_ms: u64,
    /// Our retry policy around uploads, manifest updates and deletes.
    pub retry: RetryPolicy,
    #[serde(skip)]
    pub fail_point: Option<FailPoint>,
}

impl Default for TieredConfig {
    fn default() -> Self {
        TieredConfig {
            store: StoreSpec::Local {
                path: PathBuf::from("./data/remote-storage"),
            },
            prefix: String::new(),
            chunk_bytes: 4 << 20,
            cache_bytes: 256 << 20,
            prefetch_chunks: 2,
            prefetch_in_flight_max: 8,
            upload_concurrency: 4,
            upload_part_bytes: 8 << 20,
            index_interval_bytes: 64 << 10,
            task_interval_ms: 1_000,
            request_timeout_ms: 30_000,
            retry: RetryPolicy::default(),
            fail_point: None,
        }
    }
}

impl TieredArgs {
    /// Resolve flags into a config; `data_dir` anchors the default local store.
    pub fn to_config(&self, data_dir: &FsPath) -> Result<TieredConfig> {
        let mut c = TieredConfig {
            store: StoreSpec::Local {
                path: data_dir.join("remote-storage"),
            },
            fail_point: FailPoint::from_env(),
            ..TieredConfig::default()
        };
        let region = self
            .s3_region
            .clone()
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok());
        if let Some(url) = &self.remote_storage {
            let (store, prefix) = parse_store_url(url, self, region.clone())?;
            c.store = store;
            c.prefix = prefix;
        } else if let Some(bucket) = &self.s3_bucket {
            c.store = StoreSpec::S3 {
                bucket: bucket.clone(),
                endpoint: self.s3_endpoint.clone(),
                region,
                path_style: self.s3_path_style.unwrap_or(self.s3_endpoint.is_some()),
            };
        } else if self.s3_endpoint.is_some() {
            return Err(TieredError::Config(
                "--s3-endpoint needs --s3-bucket".into(),
            ));
        }
        if let Some(p) = &self.remote_prefix {
            c.prefix = p.trim_matches('/').to_string();
        }
        if let Some(v) = self.remote_cache_bytes {
            c.cache_bytes = v;
        }
        if let Some(v) = self.remote_chunk_bytes {
            c.chunk_bytes = v.max(4096);
        }
        if let Some(v) = self.remote_upload_concurrency {
            c.upload_concurrency = v.max(1);
        }
        if let Some(v) = self.remote_task_interval_ms {
            c.task_interval_ms = v.max(10);
        }
        Ok(c)
    }
}

fn parse_store_url(
    url: &str,
    args: &TieredArgs,
    region: Option<String>,
) -> Result<(StoreSpec, String)> {
    let bad = |why: &str| TieredError::Config(format!("{url}: {why}"));
    let parsed = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    let prefix = parsed.path().trim_matches('/').to_string();
    let host = || {
        parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .ok_or_else(|| bad("missing bucket/container"))
    };
    match parsed.scheme() {
        "file" => {
            let path = parsed
                .to_file_path()
                .map_err(|()| bad("not an absolute file path"))?;
            Ok((StoreSpec::Local { path }, String::new()))
        }
        "s3" | "s3a" => Ok((
            StoreSpec::S3 {
                bucket: host()?,
                endpoint: args.s3_endpoint.clone(),
                region,
                path_style: args.s3_path_style.unwrap_or(args.s3_endpoint.is_some()),
            },
            prefix,
        )),
        "gs" => Ok((StoreSpec::Gcs { bucket: host()? }, prefix)),
        "az" | "azure" | "abfs" => Ok((StoreSpec::Azure { container: host()? }, prefix)),
        other => Err(bad(&format!("unsupported scheme {other}"))),
    }
}

/// Build the object-store client. The client's own retries are kept short: our uploader
/// retries with backoff and jitter around whole operations, and a reader must fail fast
/// (with a retriable error) when the store is down rather than hang a Fetch.
pub fn build_store(c: &TieredConfig) -> Result<Arc<dyn ObjectStore>> {
    let client_retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(500),
            base: 2.0,
        },
        max_retries: 2,
        retry_timeout: Duration::from_millis(c.request_timeout_ms),
    };
    let options = ClientOptions::new()
        .with_timeout(Duration::from_millis(c.request_timeout_ms))
        .with_connect_timeout(Duration::from_millis(c.request_timeout_ms.min(5_000)));
    let cfg_err = |e: object_store::Error| TieredError::Config(e.to_string());
    Ok(match &c.store {
        StoreSpec::Local { path } => {
            std::fs::create_dir_all(path).map_err(|e| {
                TieredError::Config(format!("cannot create {}: {e}", path.display()))
            })?;
            Arc::new(LocalFileSystem::new_with_prefix(path).map_err(cfg_err)?)
        }
        StoreSpec::S3 {
            bucket,
            endpoint,
            region,
            path_style,
        } => {
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_virtual_hosted_style_request(!path_style)
                .with_retry(client_retry)
                .with_client_options(
                    options.with_allow_http(
                        endpoint
                            .as_deref()
                            .is_some_and(|e| e.starts_with("http://")),
                    ),
                );
            if let Some(e) = endpoint {
                b = b.with_endpoint(e);
            }
            if let Some(r) = region {
                b = b.with_region(r);
            }
            Arc::new(b.build().map_err(cfg_err)?)
        }
        StoreSpec::Gcs { bucket } => Arc::new(
            GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket)
                .with_retry(client_retry)
                .with_client_options(options)
                .build()
                .map_err(cfg_err)?,
        ),
        StoreSpec::Azure { container } => Arc::new(
            MicrosoftAzureBuilder::from_env()
                .with_container_name(container)
                .with_retry(client_retry)
                .with_client_options(options)
                .build()
                .map_err(cfg_err)?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_resolve_to_stores() {
        let d = FsPath::new("/data");
        let c = TieredArgs::default().to_config(d).unwrap();
        assert_eq!(
            c.store,
            StoreSpec::Local {
                path: "/data/remote-storage".into()
            }
        );
        let a = TieredArgs {
            s3_endpoint: Some("http://127.0.0.1:9000".into()),
            s3_bucket: Some("cold".into()),
            s3_region: Some("eu-west-1".into()),
            ..Default::default()
        };
        let c = a.to_config(d).unwrap();
        assert_eq!(
            c.store,
            StoreSpec::S3 {
                bucket: "cold".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: Some("eu-west-1".into()),
                path_style: true
            }
        );
        let a = TieredArgs {
            remote_storage: Some("file:///tmp/x".into()),
            ..Default::default()
        };
        assert_eq!(
            a.to_config(d).unwrap().store,
            StoreSpec::Local {
                path: "/tmp/x".into()
            }
        );
        let a = TieredArgs {
            remote_storage: Some("gs://b/some/prefix".into()),
            ..Default::default()
        };
        let c = a.to_config(d).unwrap();
        assert_eq!(c.store, StoreSpec::Gcs { bucket: "b".into() });
        assert_eq!(c.prefix, "some/prefix");
        let bad = TieredArgs {
            remote_storage: Some("ftp://x".into()),
            ..Default::default()
        };
        assert!(bad.to_config(d).is_err());
        let bad = TieredArgs {
            s3_endpoint: Some("http://x".into()),
            ..Default::default()
        };
        assert!(bad.to_config(d).is_err());
    }
}
