//! Producer ids for InitProducerId: handed out from blocks the controller allocates
//! (AllocateProducerIds, Kafka's KIP-730) and records in the metadata log before any id of a
//! block is used, so ids are unique across the cluster and never reused after a restart or a
//! crash. Transactional ids keep their producer id and get a bumped epoch on every
//! InitProducerId (fencing older instances), persisted too.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use kafka_protocol::ResponseError;
use parking_lot::Mutex;

/// Ids per block (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
/// Bound on remembered transactional ids (a named limit; Kafka expires them after
/// `transactional.id.expiration.ms`).
pub const TRANSACTIONAL_IDS_MAX: usize = 100_000;
/// Kafka's `transaction.max.timeout.ms` default.
pub const TRANSACTION_MAX_TIMEOUT_MS: i32 = 900_000;
/// Epochs at or above this are exhausted: a new producer id is allocated (Kafka: Short.MAX - 1).
const EPOCH_EXHAUSTED: i16 = i16::MAX - 1;

/// Where releases before the metadata log kept the end of the last block (imported once).
pub const LEGACY_BLOCK_FILE: &str = "producer-id-block";

/// Where blocks of producer ids come from (the controller, through the metadata log).
pub trait ProducerIdBlocks: Send + Sync {
    /// A fresh block `[start, start + len)`, durable before it is returned.
    fn next_block(&self) -> io::Result<(i64, i64)>;
}
const TXN_FILE: &str = "transactional-ids";

/// InitProducerId failures with their Kafka error codes.
#[derive(Debug, thiserror::Error)]
pub enum InitProducerIdError {
    #[error("transactional id must not be empty")]
    InvalidRequest,
    #[error("transaction timeout {0} ms is outside (0, {TRANSACTION_MAX_TIMEOUT_MS}]")]
    InvalidTransactionTimeout(i32),
    #[error("producer id {0} epoch {1} is not the current one")]
    ProducerFenced(i64, i16),
    #[error("too many transactional ids")]
    TooManyTransactionalIds,
    #[error("storage error: {0}")]
    Storage(#[from] io::Error),
}

impl InitProducerIdError {
    pub fn kafka_code(&self) -> i16 {
        let e = match self {
            InitProducerIdError::InvalidRequest => ResponseError::InvalidRequest,
            InitProducerIdError::InvalidTransactionTimeout(_) => {
                ResponseError::InvalidTransactionTimeout
            }
            InitProducerIdError::ProducerFenced(..) => ResponseError::ProducerFenced,
            // Kafka answers an overloaded coordinator with COORDINATOR_NOT_AVAILABLE.
            InitProducerIdError::TooManyTransactionalIds => ResponseError::CoordinatorNotAvailable,
            InitProducerIdError::Storage(_) => ResponseError::KafkaStorageError,
        };
        e.code()
    }
}

#[derive(Debug)]
struct State {
    next_id: i64,
    block_end: i64,
    /// transactional id -> (producer id, epoch)
    transactional: BTreeMap<String, (i64, i16)>,
}

pub struct ProducerIdManager {
    dir: PathBuf,
    blocks: std::sync::Arc<dyn ProducerIdBlocks>,
    state: Mutex<State>,
}

fn write_atomically(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, dir.join(name))?;
    fs::File::open(dir)?.sync_all()
}

impl ProducerIdManager {
    /// Load the transactional ids from `data_dir`; producer ids come from `blocks`.
    pub fn open(
        data_dir: &Path,
        blocks: std::sync::Arc<dyn ProducerIdBlocks>,
    ) -> io::Result<ProducerIdManager> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        let mut transactional = BTreeMap::new();
        match fs::read_to_string(data_dir.join(TXN_FILE)) {
            Ok(text) => {
                for line in text.lines().filter(|l| !l.is_empty()) {
                    // "<producer id> <epoch> <transactional id>" (the id may contain spaces)
                    let mut parts = line.splitn(3, ' ');
                    let (Some(pid), Some(epoch), Some(tid)) =
                        (parts.next(), parts.next(), parts.next())
                    else {
                        return Err(bad("bad transactional-ids line"));
                    };
                    let pid = pid.parse().map_err(|_| bad("bad producer id"))?;
                    let epoch = epoch.parse().map_err(|_| bad("bad epoch"))?;
                    transactional.insert(tid.to_string(), (pid, epoch));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(ProducerIdManager {
            dir: data_dir.to_path_buf(),
            blocks,
            state: Mutex::new(State {
                next_id: 0,
                block_end: 0,
                transactional,
            }),
        })
    }

    fn next_id(&self, st: &mut State) -> io::Result<i64> {
        if st.next_id >= st.block_end {
            // Committed to the metadata log before use: after a crash we start past it.
            let (start, len) = self.blocks.next_block()?;
            assert!(len > 0, "an empty producer-id block");
            st.next_id = start;
            st.block_end = start + len;
            tracing::info!(start, end = st.block_end, "allocated producer id block");
        }
        let id = st.next_id;
        st.next_id += 1;
        Ok(id)
    }

    /// A fresh producer id (epoch 0) for an idempotent producer, as Kafka does for
    /// `transactional_id = null`.
    pub fn init_idempotent(&self) -> Result<(i64, i16), InitProducerIdError> {
        let mut st = self.state.lock();
        Ok((self.next_id(&mut st)?, 0))
    }

    /// InitProducerId for a transactional id: same producer id, epoch + 1 (a new id when the
    /// epoch is exhausted). `expected` is the (producer id, epoch) the client believes current
    /// (KIP-360, v3+), or `None`.
    pub fn init_transactional(
        &self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), InitProducerIdError> {
        if transactional_id.is_empty() {
            return Err(InitProducerIdError::InvalidRequest);
        }
        if timeout_ms <= 0 || timeout_ms > TRANSACTION_MAX_TIMEOUT_MS {
            return Err(InitProducerIdError::InvalidTransactionTimeout(timeout_ms));
        }
        let mut st = self.state.lock();
        let current = st.transactional.get(transactional_id).copied();
        let next = match current {
            None => {
                if st.transactional.len() >= TRANSACTIONAL_IDS_MAX {
                    return Err(InitProducerIdError::TooManyTransactionalIds);
                }
                (self.next_id(&mut st)?, 0)
            }
            Some((pid, epoch)) => {
                if let Some((epid, eepoch)) = expected
                    && (epid, eepoch) != (pid, epoch)
                {
                    return Err(InitProducerIdError::ProducerFenced(epid, eepoch));
                }
                if epoch >= EPOCH_EXHAUSTED {
                    (self.next_id(&mut st)?, 0)
                } else {
                    (pid, epoch + 1)
                }
            }
        };
        st.transactional.insert(transactional_id.to_string(), next);
        let mut text = String::new();
        for (tid, (pid, epoch)) in &st.transactional {
            text.push_str(&format!("{pid} {epoch} {tid}\n"));
        }
        write_atomically(&self.dir, TXN_FILE, &text)?;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks as a controller hands them out: contiguous, never twice.
    #[derive(Default)]
    struct Counter(Mutex<i64>);
    impl ProducerIdBlocks for Counter {
        fn next_block(&self) -> io::Result<(i64, i64)> {
            let mut next = self.0.lock();
            let start = *next;
            *next += PRODUCER_ID_BLOCK_SIZE;
            Ok((start, PRODUCER_ID_BLOCK_SIZE))
        }
    }

    #[test]
    fn ids_are_unique_across_restarts_and_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let blocks = std::sync::Arc::new(Counter::default());
        let m = ProducerIdManager::open(dir.path(), blocks.clone()).unwrap();
        let a = m.init_idempotent().unwrap().0;
        let b = m.init_idempotent().unwrap().0;
        assert_eq!((a, b), (0, 1));
        drop(m);
        // Restart: the rest of the block is skipped, never reused.
        let m = ProducerIdManager::open(dir.path(), blocks.clone()).unwrap();
        let c = m.init_idempotent().unwrap().0;
        assert_eq!(c, PRODUCER_ID_BLOCK_SIZE);
        for _ in 0..PRODUCER_ID_BLOCK_SIZE {
            m.init_idempotent().unwrap();
        }
        assert_eq!(
            m.init_idempotent().unwrap().0,
            2 * PRODUCER_ID_BLOCK_SIZE + 1
        );
    }

    #[test]
    fn transactional_ids_bump_epochs_and_fence() {
        let dir = tempfile::tempdir().unwrap();
        let blocks = std::sync::Arc::new(Counter::default());
        let m = ProducerIdManager::open(dir.path(), blocks.clone()).unwrap();
        let (pid, e0) = m.init_transactional("tx", 60_000, None).unwrap();
        assert_eq!(e0, 0);
        let (pid2, e1) = m.init_transactional("tx", 60_000, None).unwrap();
        assert_eq!((pid2, e1), (pid, 1));
        assert_eq!(
            m.init_transactional("tx", 60_000, Some((pid, 0)))
                .unwrap_err()
                .kafka_code(),
            90
        );
        assert_eq!(
            m.init_transactional("", 1, None).unwrap_err().kafka_code(),
            42
        );
        assert_eq!(
            m.init_transactional("tx", 0, None)
                .unwrap_err()
                .kafka_code(),
            50
        );
        drop(m);
        let m = ProducerIdManager::open(dir.path(), blocks).unwrap();
        assert_eq!(
            m.init_transactional("tx", 60_000, Some((pid, 1))).unwrap(),
            (pid, 2)
        );
    }
}
