//! Where client quotas are kept: behind `QuotaStore`, so they can move into the metadata
//! quorum (KRaft's `ClientQuotaRecord`s) once the broker's metadata comes from it. Until then
//! `FileQuotaStore` keeps them in `<data_dir>/client-quotas.json`, replaced atomically (write a
//! temporary file, fsync, rename, fsync the directory) like `scram-credentials.json`, so a crash
//! leaves the old or the new file, never half of one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::entity::{
    CLIENT_ID, ClientQuotaRecord, EntityName, QuotaConfigs, QuotaEntity, QuotaKey, USER,
};

pub const QUOTAS_FILE: &str = "client-quotas.json";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum QuotaStoreError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("damaged {}: {message}", path.display())]
    Damaged { path: PathBuf, message: String },
}

/// Durable client quotas.
pub trait QuotaStore: Send + Sync {
    /// Every stored quota (at start-up).
    fn load(&self) -> Result<QuotaConfigs, QuotaStoreError>;
    /// Make `records` durable; `next` is the state with them applied. Returns once they
    /// survive a crash. A log-based store appends `records`; a snapshot store writes `next`.
    fn persist(
        &self,
        records: &[ClientQuotaRecord],
        next: &QuotaConfigs,
    ) -> Result<(), QuotaStoreError>;
}

#[derive(Serialize, Deserialize)]
struct StoredFile {
    version: u32,
    entities: Vec<StoredEntity>,
}

/// `entity`: `[type, name or null for the default]` pairs; `quotas`: key -> value.
#[derive(Serialize, Deserialize)]
struct StoredEntity {
    entity: Vec<(String, Option<String>)>,
    quotas: std::collections::BTreeMap<String, f64>,
}

/// The snapshot file store in the data dir.
pub struct FileQuotaStore {
    dir: PathBuf,
}

impl FileQuotaStore {
    pub fn new(dir: &Path) -> FileQuotaStore {
        FileQuotaStore {
            dir: dir.to_path_buf(),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.join(QUOTAS_FILE)
    }

    fn damaged(&self, message: impl Into<String>) -> QuotaStoreError {
        QuotaStoreError::Damaged {
            path: self.path(),
            message: message.into(),
        }
    }

    fn entity_from(
        &self,
        parts: &[(String, Option<String>)],
    ) -> Result<QuotaEntity, QuotaStoreError> {
        let mut e = QuotaEntity {
            user: None,
            client_id: None,
        };
        for (t, name) in parts {
            let slot = match t.as_str() {
                USER => &mut e.user,
                CLIENT_ID => &mut e.client_id,
                other => return Err(self.damaged(format!("unknown entity type {other}"))),
            };
            if slot
                .replace(EntityName::from_wire(name.as_deref()))
                .is_some()
            {
                return Err(self.damaged(format!("entity type {t} twice")));
            }
        }
        if e.user.is_none() && e.client_id.is_none() {
            return Err(self.damaged("empty entity"));
        }
        Ok(e)
    }
}

impl QuotaStore for FileQuotaStore {
    fn load(&self) -> Result<QuotaConfigs, QuotaStoreError> {
        let path = self.path();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(QuotaConfigs::new()),
            Err(source) => return Err(QuotaStoreError::Io { path, source }),
        };
        let file: StoredFile =
            serde_json::from_slice(&bytes).map_err(|e| self.damaged(e.to_string()))?;
        if file.version != FORMAT_VERSION {
            return Err(self.damaged(format!("format version {}", file.version)));
        }
        let mut configs = QuotaConfigs::new();
        for stored in file.entities {
            let entity = self.entity_from(&stored.entity)?;
            let values = configs.entry(entity).or_default();
            for (key, value) in stored.quotas {
                let k = QuotaKey::parse(&key)
                    .ok_or_else(|| self.damaged(format!("unknown quota key {key}")))?;
                k.check_value(value).map_err(|m| self.damaged(m))?;
                values.insert(k, value);
            }
        }
        configs.retain(|_, v| !v.is_empty());
        Ok(configs)
    }

    fn persist(
        &self,
        _records: &[ClientQuotaRecord],
        next: &QuotaConfigs,
    ) -> Result<(), QuotaStoreError> {
        let file = StoredFile {
            version: FORMAT_VERSION,
            entities: next
                .iter()
                .map(|(entity, values)| StoredEntity {
                    entity: entity
                        .parts()
                        .into_iter()
                        .map(|(t, n)| (t.to_string(), n.to_wire().map(str::to_string)))
                        .collect(),
                    quotas: values
                        .iter()
                        .map(|(k, v)| (k.name().to_string(), *v))
                        .collect(),
                })
                .collect(),
        };
        let bytes = serde_json::to_vec_pretty(&file).expect("quotas serialize");
        crate::topic_store::write_atomically(&self.dir, QUOTAS_FILE, &bytes).map_err(|source| {
            QuotaStoreError::Io {
                path: self.path(),
                source,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::entity::replay;

    #[test]
    fn quotas_survive_reopen_and_a_damaged_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileQuotaStore::new(dir.path());
        assert!(store.load().unwrap().is_empty());
        let records = vec![
            ClientQuotaRecord {
                entity: QuotaEntity::both(EntityName::Named("alice".into()), EntityName::Default),
                key: QuotaKey::ProducerByteRate,
                value: Some(1_048_576.0),
            },
            ClientQuotaRecord {
                entity: QuotaEntity::client(EntityName::Default),
                key: QuotaKey::RequestPercentage,
                value: Some(25.5),
            },
        ];
        let mut next = QuotaConfigs::new();
        replay(&mut next, &records);
        store.persist(&records, &next).unwrap();
        assert_eq!(FileQuotaStore::new(dir.path()).load().unwrap(), next);
        std::fs::write(dir.path().join(QUOTAS_FILE), b"{\"version\":1,").unwrap();
        assert!(store.load().is_err());
        let bad = br#"{"version":1,"entities":[{"entity":[["ip","1.2.3.4"]],"quotas":{}}]}"#;
        std::fs::write(dir.path().join(QUOTAS_FILE), bad).unwrap();
        assert!(store.load().is_err());
    }
}
