//! Where ACLs live between restarts, behind `AclStore` so they can move into the metadata
//! quorum (as KRaft's `AccessControlEntryRecord`s) without touching the authorizer. Today:
//! `<data_dir>/acls.json`, replaced atomically (write a temporary file, fsync, rename, fsync
//! the directory; the same path as `scram-credentials.json`), so a crash leaves the old or the
//! new list, never half of one.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::types::AclBinding;

pub const ACLS_FILE: &str = "acls.json";

#[derive(Debug, thiserror::Error)]
pub enum AclStoreError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("damaged {}: {message}", path.display())]
    Damaged { path: PathBuf, message: String },
}

/// Durable ACL storage: every change is written through `save` before it is visible.
pub trait AclStore: Send + Sync {
    fn load(&self) -> Result<Vec<AclBinding>, AclStoreError>;
    /// Replace the stored ACLs with `acls` (all of them), durably.
    fn save(&self, acls: &[AclBinding]) -> Result<(), AclStoreError>;
}

/// `<data_dir>/acls.json`.
pub struct JsonFileStore {
    dir: PathBuf,
}

impl JsonFileStore {
    pub fn new(dir: &Path) -> Self {
        JsonFileStore {
            dir: dir.to_path_buf(),
        }
    }
}

impl AclStore for JsonFileStore {
    fn load(&self) -> Result<Vec<AclBinding>, AclStoreError> {
        let path = self.dir.join(ACLS_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| AclStoreError::Damaged {
                path,
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(AclStoreError::Io { path, source }),
        }
    }

    fn save(&self, acls: &[AclBinding]) -> Result<(), AclStoreError> {
        let bytes = serde_json::to_vec_pretty(acls).expect("ACLs serialize");
        crate::topic_store::write_atomically(&self.dir, ACLS_FILE, &bytes).map_err(|source| {
            AclStoreError::Io {
                path: self.dir.join(ACLS_FILE),
                source,
            }
        })
    }
}

/// In memory only (tests, and embedders that keep ACLs elsewhere).
#[derive(Default)]
pub struct MemoryStore {
    acls: Mutex<Vec<AclBinding>>,
    /// When set, `save` fails (tests of the write-through rule).
    pub fail_saves: std::sync::atomic::AtomicBool,
}

impl AclStore for MemoryStore {
    fn load(&self) -> Result<Vec<AclBinding>, AclStoreError> {
        Ok(self.acls.lock().clone())
    }

    fn save(&self, acls: &[AclBinding]) -> Result<(), AclStoreError> {
        if self.fail_saves.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(AclStoreError::Io {
                path: PathBuf::from("memory"),
                source: std::io::ErrorKind::Other.into(),
            });
        }
        *self.acls.lock() = acls.to_vec();
        Ok(())
    }
}
