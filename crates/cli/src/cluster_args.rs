//! `--controller-quorum-voters` (Kafka's `controller.quorum.voters`), `--controller-listen`,
//! `--process-roles` (`process.roles`) and `--cluster-id`: a broker listed among the voters is
//! also a controller (combined mode); one that is not is a broker-only node.

use std::collections::BTreeMap;

use anyhow::Context;
use streamforge_broker::metadata_cluster::{ClusterOptions, ProcessRoles};

/// Parse `1@host:port,2@host:port,...` into voter id → address.
pub fn parse_voters(text: &str) -> anyhow::Result<BTreeMap<u64, String>> {
    let mut voters = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, addr) = entry
            .split_once('@')
            .with_context(|| format!("voter '{entry}' is not id@host:port"))?;
        let id: u64 = id
            .parse()
            .with_context(|| format!("voter id '{id}' is not a non-negative integer"))?;
        let (host, port) = addr
            .rsplit_once(':')
            .with_context(|| format!("voter address '{addr}' is not host:port"))?;
        anyhow::ensure!(!host.is_empty(), "voter address '{addr}' has no host");
        port.parse::<u16>()
            .with_context(|| format!("voter port '{port}' is not a port"))?;
        anyhow::ensure!(
            voters.insert(id, addr.to_string()).is_none(),
            "voter id {id} is listed twice"
        );
    }
    anyhow::ensure!(!voters.is_empty(), "the voters list is empty");
    Ok(voters)
}

/// The cluster settings: `None` without voters (the one-voter quorum of itself). A node listed
/// among the voters is a voter and controller as well as a broker (combined mode); one that is
/// not is a broker-only node (`process.roles=broker`), which follows the quorum as an observer
/// and needs its own `--controller-listen` for the leader to send it the metadata log.
pub fn resolve(
    voters: Option<&str>,
    listen: Option<&str>,
    roles: Option<&str>,
    node_id: i32,
) -> anyhow::Result<Option<ClusterOptions>> {
    let roles = roles
        .map(ProcessRoles::parse)
        .transpose()
        .map_err(anyhow::Error::msg)
        .context("--process-roles")?;
    let Some(voters) = voters else {
        anyhow::ensure!(
            listen.is_none(),
            "--controller-listen needs --controller-quorum-voters"
        );
        anyhow::ensure!(
            roles != Some(ProcessRoles::Broker),
            "--process-roles broker needs --controller-quorum-voters (a broker-only node follows a quorum of voters)"
        );
        return Ok(None);
    };
    let voters = parse_voters(voters).context("--controller-quorum-voters")?;
    let own = u64::try_from(node_id).ok().and_then(|id| voters.get(&id));
    let roles = match (roles, own) {
        (Some(roles), _) => roles,
        (None, Some(_)) => ProcessRoles::Combined,
        (None, None) => ProcessRoles::Broker,
    };
    let listen = match (roles, own, listen) {
        (ProcessRoles::Combined, None, _) => anyhow::bail!(
            "node id {node_id} has process roles broker,controller but is not in --controller-quorum-voters"
        ),
        (ProcessRoles::Broker, Some(_), _) => anyhow::bail!(
            "node id {node_id} is in --controller-quorum-voters, so it is a controller too: drop --process-roles broker or take it out of the voters"
        ),
        (ProcessRoles::Combined, Some(own), listen) => {
            listen.map_or_else(|| own.clone(), str::to_string)
        }
        (ProcessRoles::Broker, None, None) => anyhow::bail!(
            "broker-only node {node_id} (not in --controller-quorum-voters) needs --controller-listen HOST:PORT, where the quorum leader sends it the metadata log"
        ),
        (ProcessRoles::Broker, None, Some(listen)) => {
            let (host, port) = listen
                .rsplit_once(':')
                .with_context(|| format!("--controller-listen '{listen}' is not host:port"))?;
            port.parse::<u16>()
                .with_context(|| format!("--controller-listen port '{port}' is not a port"))?;
            let unspecified = ["", "0.0.0.0", "::", "[::]"].contains(&host);
            anyhow::ensure!(
                !unspecified,
                "--controller-listen '{listen}' of a broker-only node is the address the voters send it the metadata log: give a host they can reach"
            );
            listen.to_string()
        }
    };
    Ok(Some(ClusterOptions {
        voters,
        listen,
        roles,
        security: Default::default(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voters_parse_and_the_listener_defaults_to_this_nodes_entry() {
        let voters = "1@127.0.0.1:9093,2@127.0.0.1:9193,3@localhost:9293";
        let c = resolve(Some(voters), None, None, 2).unwrap().unwrap();
        assert_eq!(c.voters.len(), 3);
        assert_eq!(c.listen, "127.0.0.1:9193");
        assert_eq!(c.roles, ProcessRoles::Combined);
        let c = resolve(Some(voters), Some("0.0.0.0:9193"), None, 2)
            .unwrap()
            .unwrap();
        assert_eq!(c.listen, "0.0.0.0:9193");
        assert!(resolve(None, None, None, 1).unwrap().is_none());
        let roles = Some("controller,broker");
        assert!(resolve(None, None, roles, 1).unwrap().is_none());
    }

    #[test]
    fn a_node_outside_the_voters_is_a_broker_only_node_with_its_own_listener() {
        let voters = Some("1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293");
        let listen = Some("127.0.0.1:9393");
        for roles in [None, Some("broker")] {
            let c = resolve(voters, listen, roles, 4).unwrap().unwrap();
            assert_eq!(c.roles, ProcessRoles::Broker);
            assert_eq!(c.listen, "127.0.0.1:9393");
        }
        let why = |r: anyhow::Result<_>| format!("{:#}", r.unwrap_err());
        assert!(why(resolve(voters, None, None, 4)).contains("--controller-listen"));
        assert!(why(resolve(voters, Some("0.0.0.0:9393"), None, 4)).contains("reach"));
        assert!(why(resolve(voters, listen, Some("broker"), 2)).contains("controller too"));
        assert!(why(resolve(voters, listen, Some("broker,controller"), 4)).contains("not in"));
        assert!(why(resolve(voters, listen, Some("controller"), 1)).contains("not supported"));
        assert!(why(resolve(None, None, Some("broker"), 1)).contains("needs"));
    }

    #[test]
    fn bad_voter_lists_are_refused() {
        for bad in ["", "1@", "x@h:1", "1@h", "1@h:99999", "1@h:1,1@h:2", "1@:5"] {
            assert!(parse_voters(bad).is_err(), "{bad}");
        }
        assert!(resolve(None, Some("h:1"), None, 1).is_err());
    }
}
