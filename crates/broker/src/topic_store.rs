//! Durable topic metadata: names, UUIDs, partition counts and config overrides, kept in
//! `<data-dir>/topics.json` (written to a temp file, fsynced, renamed) so topic ids survive
//! restarts. Also the cluster id in `<data-dir>/meta.properties`, as Kafka keeps it.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The persisted description of one topic.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TopicRecord {
    pub name: String,
    /// Topic UUID as 32 hex digits.
    pub id: String,
    pub partitions: i32,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TopicsFile {
    topics: Vec<TopicRecord>,
}

const TOPICS_FILE: &str = "topics.json";
const META_FILE: &str = "meta.properties";

/// Reads and writes the topic metadata file.
#[derive(Debug, Clone)]
pub struct TopicStore {
    dir: PathBuf,
}

impl TopicStore {
    pub fn new(dir: &Path) -> TopicStore {
        TopicStore {
            dir: dir.to_path_buf(),
        }
    }

    pub fn load(&self) -> std::io::Result<Vec<TopicRecord>> {
        let path = self.dir.join(TOPICS_FILE);
        match fs::read(&path) {
            Ok(bytes) => {
                let file: TopicsFile = serde_json::from_slice(&bytes).map_err(|e| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: {e}", path.display()),
                    )
                })?;
                Ok(file.topics)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Atomically replace the file with `topics`.
    pub fn save(&self, topics: Vec<TopicRecord>) -> std::io::Result<()> {
        let mut topics = topics;
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        let bytes = serde_json::to_vec_pretty(&TopicsFile { topics })
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        write_atomically(&self.dir, TOPICS_FILE, &bytes)
    }

    /// The cluster id, created on first start.
    pub fn cluster_id(&self, fresh: impl FnOnce() -> String) -> std::io::Result<String> {
        let path = self.dir.join(META_FILE);
        match fs::read(&path) {
            // An existing file must name the cluster: a damaged one stops the start-up (as
            // Kafka does) instead of silently making this broker a new cluster.
            Ok(bytes) => return parse_cluster_id(&bytes).ok_or_else(|| damaged_meta(&path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("cannot read {}: {e}", path.display()),
                ));
            }
        }
        let id = fresh();
        let text = format!("version=1\ncluster.id={id}\n");
        write_atomically(&self.dir, META_FILE, text.as_bytes())?;
        Ok(id)
    }
}

/// The `cluster.id` of a `meta.properties` file: text, with a non-empty printable id.
fn parse_cluster_id(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("cluster.id="))?
        .trim();
    let printable = !id.is_empty() && id.chars().all(|c| c.is_ascii_graphic());
    printable.then(|| id.to_string())
}

fn damaged_meta(path: &Path) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "damaged {}: no valid cluster.id line; refusing to start as a new cluster \
             (restore the file or remove it together with the data)",
            path.display()
        ),
    )
}

fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))?;
    // Make the rename itself durable.
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_topics_and_keeps_cluster_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = TopicStore::new(dir.path());
        assert!(store.load().unwrap().is_empty());
        let rec = TopicRecord {
            name: "a".into(),
            id: "00112233445566778899aabbccddeeff".into(),
            partitions: 3,
            configs: BTreeMap::from([("retention.ms".into(), "1000".into())]),
        };
        store.save(vec![rec.clone()]).unwrap();
        assert_eq!(store.load().unwrap(), vec![rec]);
        let id = store.cluster_id(|| "first".into()).unwrap();
        assert_eq!(store.cluster_id(|| "second".into()).unwrap(), id);
        fs::write(dir.path().join(META_FILE), b"\xff\x00garbage").unwrap();
        let err = store.cluster_id(|| "third".into()).unwrap_err();
        assert!(err.to_string().contains("meta.properties"), "{err}");
        assert_eq!(
            fs::read(dir.path().join(META_FILE)).unwrap(),
            b"\xff\x00garbage"
        );
    }
}
