//! `--controller-quorum-voters` (Kafka's `controller.quorum.voters`), `--controller-listen`
//! and `--cluster-id`: a broker listed among the voters is also a controller (combined mode).

use std::collections::BTreeMap;

use anyhow::Context;
use streamforge_broker::metadata_cluster::ClusterOptions;

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

/// The cluster settings: `None` without voters (the one-voter quorum of itself).
pub fn resolve(
    voters: Option<&str>,
    listen: Option<&str>,
    node_id: i32,
) -> anyhow::Result<Option<ClusterOptions>> {
    let Some(voters) = voters else {
        anyhow::ensure!(
            listen.is_none(),
            "--controller-listen needs --controller-quorum-voters"
        );
        return Ok(None);
    };
    let voters = parse_voters(voters).context("--controller-quorum-voters")?;
    let own = u64::try_from(node_id)
        .ok()
        .and_then(|id| voters.get(&id))
        .with_context(|| {
            format!("node id {node_id} is not in --controller-quorum-voters (every broker of a cluster is a voter for now)")
        })?;
    let listen = listen.map_or_else(|| own.clone(), str::to_string);
    Ok(Some(ClusterOptions { voters, listen }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voters_parse_and_the_listener_defaults_to_this_nodes_entry() {
        let voters = "1@127.0.0.1:9093,2@127.0.0.1:9193,3@localhost:9293";
        let c = resolve(Some(voters), None, 2).unwrap().unwrap();
        assert_eq!(c.voters.len(), 3);
        assert_eq!(c.listen, "127.0.0.1:9193");
        let c = resolve(Some(voters), Some("0.0.0.0:9193"), 2)
            .unwrap()
            .unwrap();
        assert_eq!(c.listen, "0.0.0.0:9193");
        assert!(resolve(None, None, 1).unwrap().is_none());
    }

    #[test]
    fn bad_voter_lists_are_refused() {
        for bad in ["", "1@", "x@h:1", "1@h", "1@h:99999", "1@h:1,1@h:2", "1@:5"] {
            assert!(parse_voters(bad).is_err(), "{bad}");
        }
        assert!(resolve(Some("1@h:1"), None, 2).is_err());
        assert!(resolve(None, Some("h:1"), 1).is_err());
    }
}
