//! Topic and partition creation rules that sit beside the `ReplicaManager`: all-or-nothing
//! creation of a range of partitions, and Kafka's topic name collision rule.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use streamforge_log::LogConfig;

use crate::partition::{Partition, RemoteTier};
use crate::replica_manager::TopicError;

/// Kafka's collision rule: `.` and `_` may not be the only difference between two topic names
/// (metric names replace one by the other). The existing topic `name` collides with, if any.
pub fn colliding_topic<'a>(
    existing: impl Iterator<Item = &'a String>,
    name: &str,
) -> Option<String> {
    let key = name.replace('.', "_");
    existing
        .filter(|t| t.as_str() != name && t.replace('.', "_") == key)
        .map(|t| t.to_string())
        .next()
}

/// Create partitions `indexes` of a topic, all or none: on a failure, close the ones created
/// and remove every partition directory this call made (a failed 10,000-partition creation
/// once left 4,955 empty directories behind).
pub(crate) fn create_all(
    topic: &Arc<str>,
    indexes: &[i32],
    data_dir: &Path,
    config: &LogConfig,
    remote: &RemoteTier,
) -> Result<Vec<Arc<Partition>>, TopicError> {
    let mut made: Vec<PathBuf> = Vec::new();
    let mut parts = Vec::with_capacity(indexes.len());
    for &p in indexes {
        let dir = data_dir.join(format!("{topic}-{p}"));
        if !dir.exists() {
            made.push(dir);
        }
        match Partition::create(topic, p, data_dir, config.clone(), remote.clone()) {
            Ok(part) => parts.push(Arc::new(part)),
            Err(e) => {
                remove_created(&parts, &made);
                return Err(TopicError::Storage(format!(
                    "creating partition {p} of topic '{topic}' failed, none were created: {e}"
                )));
            }
        }
    }
    Ok(parts)
}

/// Undo `create_all`: close the logs, remove the directories it made.
pub(crate) fn remove_created(parts: &[Arc<Partition>], made: &[PathBuf]) {
    for p in parts {
        drop(p.take_log());
    }
    for dir in made {
        if let Err(e) = std::fs::remove_dir_all(dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), error = %e, "could not remove a partition of a failed creation");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_and_underscores_collide() {
        let existing: Vec<String> = vec!["a.b".into(), "x".into()];
        assert_eq!(
            colliding_topic(existing.iter(), "a_b").as_deref(),
            Some("a.b")
        );
        assert_eq!(
            colliding_topic(existing.iter(), "a.b"),
            None,
            "the same name"
        );
        assert_eq!(colliding_topic(existing.iter(), "a-b"), None);
    }

    #[test]
    fn a_failed_creation_removes_what_it_made() {
        let dir = tempfile::tempdir().unwrap();
        let topic: Arc<str> = Arc::from("t");
        // Partition 2's directory path is taken by a file: its log cannot be opened.
        std::fs::write(dir.path().join("t-2"), b"not a directory").unwrap();
        let err = create_all(
            &topic,
            &[0, 1, 2, 3],
            dir.path(),
            &LogConfig::default(),
            &RemoteTier::default(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("none were created"), "{err}");
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        assert_eq!(left, ["t-2"], "only the file that was there before");
    }
}
