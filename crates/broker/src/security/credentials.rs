//! SCRAM credentials of every user: salt, iterations, StoredKey and ServerKey per mechanism
//! (never a password), in `<data_dir>/scram-credentials.json`, replaced atomically (write a
//! temporary file, fsync, rename, fsync the directory) so a crash leaves the old or the new
//! file, never half of one. The metadata image (KRaft's `UserScramCredentialRecord`) will own
//! them once the broker's metadata is wired to it; the file is this broker's store until then.
//! SASL PLAIN verifies against the same credentials (as Redpanda does), so no password is
//! stored anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::RwLock;

use super::Mechanism;
use super::scram::ScramCredential;

pub const CREDENTIALS_FILE: &str = "scram-credentials.json";
/// Most users the store holds (a bound on the file and on DescribeUserScramCredentials).
pub const USERS_MAX: usize = 100_000;
/// Longest user name accepted.
pub const USER_NAME_BYTES_MAX: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("damaged {}: {message}", path.display())]
    Damaged { path: PathBuf, message: String },
    #[error("too many users (at most {USERS_MAX})")]
    TooMany,
}

type Users = BTreeMap<String, BTreeMap<String, ScramCredential>>;

/// The store: read once at start-up, every change written through before it is visible.
pub struct CredentialStore {
    dir: PathBuf,
    users: RwLock<Users>,
}

impl CredentialStore {
    pub fn open(dir: &Path) -> Result<CredentialStore, CredentialsError> {
        let path = dir.join(CREDENTIALS_FILE);
        let users = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| CredentialsError::Damaged {
                path: path.clone(),
                message: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Users::new(),
            Err(source) => return Err(CredentialsError::Io { path, source }),
        };
        Ok(CredentialStore {
            dir: dir.to_path_buf(),
            users: RwLock::new(users),
        })
    }

    pub fn get(&self, user: &str, m: Mechanism) -> Option<ScramCredential> {
        self.users.read().get(user)?.get(m.name()).cloned()
    }

    /// Whether `password` is `user`'s: derives StoredKey with the stored salt (SHA-256's
    /// credential first, then SHA-512's) and compares in constant time. PBKDF2: call it off the
    /// async threads. SASL PLAIN and the dashboard's login both check passwords this way.
    pub fn verify_password(&self, user: &str, password: &str) -> bool {
        [Mechanism::ScramSha256, Mechanism::ScramSha512]
            .into_iter()
            .find_map(|m| self.get(user, m).map(|c| (m, c)))
            .is_some_and(|(m, c)| super::scram::verify_password(m, &c, password))
    }

    /// Every user with its mechanisms and iteration counts, sorted by name.
    pub fn describe(&self) -> Vec<(String, Vec<(Mechanism, u32)>)> {
        self.users
            .read()
            .iter()
            .map(|(user, creds)| (user.clone(), mechanisms(creds)))
            .collect()
    }

    pub fn describe_user(&self, user: &str) -> Option<Vec<(Mechanism, u32)>> {
        self.users.read().get(user).map(mechanisms)
    }

    /// Apply upserts and deletions together and persist them (one file write).
    pub fn apply(
        &self,
        upserts: Vec<(String, Mechanism, ScramCredential)>,
        deletions: Vec<(String, Mechanism)>,
    ) -> Result<(), CredentialsError> {
        let mut users = self.users.write();
        let mut next = users.clone();
        for (user, m) in deletions {
            if let Some(creds) = next.get_mut(&user) {
                creds.remove(m.name());
                if creds.is_empty() {
                    next.remove(&user);
                }
            }
        }
        for (user, m, cred) in upserts {
            next.entry(user)
                .or_default()
                .insert(m.name().to_string(), cred);
        }
        if next.len() > USERS_MAX {
            return Err(CredentialsError::TooMany);
        }
        let bytes = serde_json::to_vec_pretty(&next).expect("credentials serialize");
        crate::topic_store::write_atomically(&self.dir, CREDENTIALS_FILE, &bytes).map_err(
            |source| CredentialsError::Io {
                path: self.dir.join(CREDENTIALS_FILE),
                source,
            },
        )?;
        *users = next;
        Ok(())
    }
}

fn mechanisms(creds: &BTreeMap<String, ScramCredential>) -> Vec<(Mechanism, u32)> {
    creds
        .iter()
        .filter_map(|(name, c)| Some((name.parse::<Mechanism>().ok()?, c.iterations)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram;

    #[test]
    fn credentials_survive_reopen_and_hold_no_password() {
        let dir = tempfile::tempdir().unwrap();
        let store = CredentialStore::open(dir.path()).unwrap();
        let cred = scram::new_credential(Mechanism::ScramSha256, "s3cret-pw", 4096).unwrap();
        store
            .apply(
                vec![("alice".into(), Mechanism::ScramSha256, cred.clone())],
                vec![],
            )
            .unwrap();
        let text = std::fs::read_to_string(dir.path().join(CREDENTIALS_FILE)).unwrap();
        assert!(!text.contains("s3cret-pw"));
        let again = CredentialStore::open(dir.path()).unwrap();
        assert_eq!(again.get("alice", Mechanism::ScramSha256), Some(cred));
        assert_eq!(
            again.describe_user("alice").unwrap(),
            vec![(Mechanism::ScramSha256, 4096)]
        );
        again
            .apply(vec![], vec![("alice".into(), Mechanism::ScramSha256)])
            .unwrap();
        assert!(
            CredentialStore::open(dir.path())
                .unwrap()
                .describe()
                .is_empty()
        );
        std::fs::write(dir.path().join(CREDENTIALS_FILE), b"{not json").unwrap();
        assert!(CredentialStore::open(dir.path()).is_err());
    }
}
