//! openraft's own storage test suite (`openraft::testing::Suite`) run against the file-backed
//! store (a fresh directory per case) and the in-memory one.

use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};

use super::{LogStore, StateMachine, TypeConfig};
use crate::quorum::NodeId;

struct InDirectory;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for InDirectory {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = LogStore::open(dir.path()).expect("open the log");
        let state_machine = StateMachine::open(dir.path()).expect("open the state machine");
        Ok((dir, log, state_machine))
    }
}

struct InMemory;

impl StoreBuilder<TypeConfig, LogStore, StateMachine> for InMemory {
    async fn build(&self) -> Result<((), LogStore, StateMachine), StorageError<NodeId>> {
        Ok(((), LogStore::default(), StateMachine::default()))
    }
}

#[test]
fn the_file_store_passes_openrafts_storage_suite() {
    Suite::test_all(InDirectory).unwrap();
}

#[test]
fn the_memory_store_passes_openrafts_storage_suite() {
    Suite::test_all(InMemory).unwrap();
}
