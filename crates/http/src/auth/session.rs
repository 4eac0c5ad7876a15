//! The server-side session table: a random 32-byte id (hex in the cookie) per login, ended by
//! logout, by [`SessionTable`]'s idle timeout, or when the table is full and the session is the
//! least recently used.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::Principal;

/// The cookie holding the session id.
pub const SESSION_COOKIE: &str = "sf_session";
/// Random bytes of a session id (from the operating system's CSPRNG via `rand`).
pub const SESSION_ID_BYTES: usize = 32;

struct Session {
    principal: Principal,
    last_used: Instant,
}

/// Live sessions, at most `sessions_max`, each ending `timeout` after its last use.
pub struct SessionTable {
    timeout: Duration,
    sessions_max: usize,
    sessions: Mutex<HashMap<String, Session>>,
}

impl SessionTable {
    pub fn new(timeout: Duration, sessions_max: usize) -> SessionTable {
        SessionTable {
            timeout,
            sessions_max: sessions_max.max(1),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// A new session for `principal`; answers its id. A full table first drops the expired
    /// sessions, then the least recently used one.
    pub fn create(&self, principal: Principal) -> String {
        let id = new_session_id();
        let now = Instant::now();
        let mut sessions = self.sessions.lock();
        if sessions.len() >= self.sessions_max {
            sessions.retain(|_, s| now.duration_since(s.last_used) < self.timeout);
        }
        if sessions.len() >= self.sessions_max
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| id.clone())
        {
            sessions.remove(&oldest);
            tracing::info!(
                sessions_max = self.sessions_max,
                "dashboard session table full: the least recently used session ended"
            );
        }
        sessions.insert(
            id.clone(),
            Session {
                principal,
                last_used: now,
            },
        );
        assert!(
            sessions.len() <= self.sessions_max,
            "session table over its bound"
        );
        id
    }

    /// The principal of a live session, which counts as a use; an expired one is removed.
    pub fn touch(&self, id: &str) -> Option<Principal> {
        let now = Instant::now();
        let mut sessions = self.sessions.lock();
        let session = sessions.get_mut(id)?;
        if now.duration_since(session.last_used) >= self.timeout {
            sessions.remove(id);
            return None;
        }
        session.last_used = now;
        Some(session.principal.clone())
    }

    /// Logout.
    pub fn remove(&self, id: &str) {
        self.sessions.lock().remove(id);
    }

    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn new_session_id() -> String {
    let bytes: [u8; SESSION_ID_BYTES] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_hex_and_the_table_is_bounded() {
        let table = SessionTable::new(Duration::from_secs(60), 2);
        let a = table.create(Principal::user("a"));
        let b = table.create(Principal::user("b"));
        assert_eq!(a.len(), 2 * SESSION_ID_BYTES);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert_eq!(table.touch(&a), Some(Principal::user("a")));
        // Full: the least recently used session (b) ends.
        let c = table.create(Principal::user("c"));
        assert_eq!(table.len(), 2);
        assert_eq!(table.touch(&b), None);
        assert!(table.touch(&a).is_some() && table.touch(&c).is_some());
        table.remove(&a);
        assert_eq!(table.touch(&a), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_session_expires_and_use_extends_it() {
        let table = SessionTable::new(Duration::from_millis(1_000), 10);
        let id = table.create(Principal::user("a"));
        tokio::time::advance(Duration::from_millis(800)).await;
        assert!(table.touch(&id).is_some());
        tokio::time::advance(Duration::from_millis(800)).await;
        assert!(table.touch(&id).is_some(), "the use 800 ms ago extended it");
        tokio::time::advance(Duration::from_millis(1_000)).await;
        assert_eq!(table.touch(&id), None);
        assert!(table.is_empty());
    }
}
