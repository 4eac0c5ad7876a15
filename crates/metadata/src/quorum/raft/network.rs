//! An in-process Raft network: voters in one process call each other's `Raft` handles
//! directly. Links can be cut ([`Router::isolate`]) to test leader loss. A TCP transport
//! (the `:9093` quorum listener) is the part of the quorum not written yet.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use parking_lot::Mutex;

use super::TypeConfig;
use crate::quorum::NodeId;

#[derive(Default)]
struct Links {
    nodes: BTreeMap<NodeId, Raft<TypeConfig>>,
    isolated: BTreeSet<NodeId>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links")
            .field("nodes", &self.nodes.keys().collect::<Vec<_>>())
            .field("isolated", &self.isolated)
            .finish()
    }
}

/// Connects the voters of one process.
#[derive(Debug, Clone, Default)]
pub struct Router {
    links: Arc<Mutex<Links>>,
}

#[derive(Debug, thiserror::Error)]
#[error("node {0} is unreachable")]
struct Cut(NodeId);

impl Router {
    pub fn add(&self, id: NodeId, raft: Raft<TypeConfig>) {
        self.links.lock().nodes.insert(id, raft);
    }

    /// Cut every link to and from `id`.
    pub fn isolate(&self, id: NodeId) {
        self.links.lock().isolated.insert(id);
    }

    pub fn heal(&self, id: NodeId) {
        self.links.lock().isolated.remove(&id);
    }

    fn target(&self, from: NodeId, to: NodeId) -> Result<Raft<TypeConfig>, Unreachable> {
        let links = self.links.lock();
        let cut = links.isolated.contains(&from) || links.isolated.contains(&to);
        match links.nodes.get(&to) {
            Some(raft) if !cut => Ok(raft.clone()),
            _ => Err(Unreachable::new(&Cut(to))),
        }
    }
}

/// One node's view of the router.
#[derive(Debug, Clone)]
pub struct RouterFactory {
    pub(super) from: NodeId,
    pub(super) router: Router,
}

/// A connection from one voter to another.
#[derive(Debug)]
pub struct Connection {
    from: NodeId,
    to: NodeId,
    router: Router,
}

impl RaftNetworkFactory<TypeConfig> for RouterFactory {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Self::Network {
        Connection {
            from: self.from,
            to: target,
            router: self.router.clone(),
        }
    }
}

type Rpc<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

fn remote<E: std::error::Error>(to: NodeId, e: E) -> RPCError<NodeId, BasicNode, E> {
    RPCError::RemoteError(RemoteError::new(to, e))
}

impl Connection {
    fn target(&self) -> Result<Raft<TypeConfig>, Unreachable> {
        self.router.target(self.from, self.to)
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>> {
        let raft = self.target().map_err(RPCError::Unreachable)?;
        let response = raft
            .append_entries(rpc)
            .await
            .map_err(|e| remote(self.to, e))?;
        // A reply can be lost as well as a request: check the link again.
        self.target().map_err(RPCError::Unreachable)?;
        Ok(response)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        let raft = self.target().map_err(RPCError::Unreachable)?;
        raft.install_snapshot(rpc)
            .await
            .map_err(|e| remote(self.to, e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>> {
        let raft = self.target().map_err(RPCError::Unreachable)?;
        raft.vote(rpc).await.map_err(|e| remote(self.to, e))
    }
}
