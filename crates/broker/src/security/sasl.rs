//! One connection's SASL state on a SASL_PLAINTEXT / SASL_SSL listener: SaslHandshake (v0, then
//! raw tokens; v1, then SaslAuthenticate), PLAIN and SCRAM-SHA-256/512, and re-authentication
//! (KIP-368) once `connections.max.reauth.ms` runs out. Until a client has authenticated only
//! ApiVersions, SaslHandshake and SaslAuthenticate are answered; anything else closes the
//! connection, as does a failed login (after its SASL_AUTHENTICATION_FAILED answer).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Mechanism;
use super::credentials::CredentialStore;
use super::principal::Principal;
use super::scram::{self, ScramError, ServerExchange};

/// The result of one SASL token.
#[derive(Debug)]
pub enum Step {
    /// Send these bytes and wait for the next token.
    Challenge(Vec<u8>),
    /// Authenticated; send these (possibly empty) bytes.
    Done(Vec<u8>, Principal),
    /// Authentication failed: answer SASL_AUTHENTICATION_FAILED with this message and close.
    Failed(String),
}

#[derive(Debug)]
enum Phase {
    /// Waiting for SaslHandshake.
    Handshake,
    /// Handshake done: waiting for the first token of `mechanism`.
    Token { mechanism: Mechanism, raw: bool },
    /// SCRAM: server-first sent, waiting for client-final.
    ScramFinal {
        exchange: Box<ServerExchange>,
        raw: bool,
    },
    /// Authenticated.
    Authenticated,
}

/// What the connection should do with a SaslHandshake.
#[derive(Debug, PartialEq, Eq)]
pub enum HandshakeOutcome {
    Accepted,
    /// UNSUPPORTED_SASL_MECHANISM, then close.
    Unsupported,
    /// ILLEGAL_SASL_STATE, then close.
    IllegalState,
}

pub struct SaslSession {
    enabled: Vec<Mechanism>,
    store: Arc<CredentialStore>,
    phase: Phase,
    /// Who the connection is (after the first successful login; re-authentication must not
    /// change it).
    principal: Option<Principal>,
    /// When the session ends (`connections.max.reauth.ms`), if it does.
    expires_at: Option<Instant>,
    reauth: Option<Duration>,
}

impl SaslSession {
    pub fn new(enabled: Vec<Mechanism>, store: Arc<CredentialStore>, reauth_ms: u64) -> Self {
        SaslSession {
            enabled,
            store,
            phase: Phase::Handshake,
            principal: None,
            expires_at: None,
            reauth: (reauth_ms > 0).then(|| Duration::from_millis(reauth_ms)),
        }
    }

    pub fn enabled_names(&self) -> Vec<&'static str> {
        self.enabled.iter().map(|m| m.name()).collect()
    }

    /// Whether ordinary requests may be served now.
    pub fn is_authenticated(&self) -> bool {
        self.principal.is_some()
    }

    pub fn principal(&self) -> Option<&Principal> {
        self.principal.as_ref()
    }

    /// Whether the session lifetime is over (the client did not re-authenticate in time).
    pub fn expired(&self, now: Instant) -> bool {
        self.expires_at.is_some_and(|t| now >= t)
    }

    /// A SaslHandshake v0 leaves the connection expecting raw (unframed-header) tokens.
    pub fn expects_raw_token(&self) -> bool {
        matches!(
            self.phase,
            Phase::Token { raw: true, .. } | Phase::ScramFinal { raw: true, .. }
        )
    }

    /// Whether a SaslAuthenticate is expected now.
    pub fn expects_authenticate(&self) -> bool {
        matches!(
            self.phase,
            Phase::Token { raw: false, .. } | Phase::ScramFinal { raw: false, .. }
        )
    }

    /// Milliseconds left in the session, for SaslAuthenticate v1+'s `session_lifetime_ms`.
    pub fn session_lifetime_ms(&self, now: Instant) -> i64 {
        self.expires_at
            .map(|t| t.saturating_duration_since(now).as_millis() as i64)
            .unwrap_or(0)
    }

    pub fn handshake(&mut self, mechanism: &str, version: i16) -> HandshakeOutcome {
        // Re-authentication (KIP-368) starts with a v1 handshake on an authenticated session.
        let reauth_ok = matches!(self.phase, Phase::Authenticated) && version >= 1;
        if !matches!(self.phase, Phase::Handshake) && !reauth_ok {
            return HandshakeOutcome::IllegalState;
        }
        match mechanism.parse::<Mechanism>() {
            Ok(m) if self.enabled.contains(&m) => {
                self.phase = Phase::Token {
                    mechanism: m,
                    raw: version == 0,
                };
                HandshakeOutcome::Accepted
            }
            _ => HandshakeOutcome::Unsupported,
        }
    }

    /// Feed one token (SaslAuthenticate's `auth_bytes` or a raw v0 token). PLAIN's password
    /// check runs PBKDF2, so call this off the async threads.
    pub fn authenticate(&mut self, token: &[u8], now: Instant) -> Step {
        let phase = std::mem::replace(&mut self.phase, Phase::Handshake);
        let step = match phase {
            Phase::Token {
                mechanism: Mechanism::Plain,
                ..
            } => self.plain(token),
            Phase::Token { mechanism, raw } => self.scram_first(mechanism, token, raw),
            Phase::ScramFinal { exchange, .. } => match exchange.finish(token) {
                Ok(server_final) => Step::Done(server_final, Principal::user(exchange.user())),
                Err(e) => Step::Failed(scram_failure(&e, exchange.user())),
            },
            Phase::Handshake | Phase::Authenticated => {
                return Step::Failed("SaslAuthenticate before SaslHandshake".into());
            }
        };
        match step {
            Step::Done(bytes, principal) => self.finish_login(bytes, principal, now),
            other => other,
        }
    }

    fn finish_login(&mut self, bytes: Vec<u8>, principal: Principal, now: Instant) -> Step {
        if let Some(old) = &self.principal
            && *old != principal
        {
            return Step::Failed(format!(
                "cannot change principals during re-authentication from {old} to {principal}"
            ));
        }
        self.phase = Phase::Authenticated;
        self.principal = Some(principal.clone());
        self.expires_at = self.reauth.map(|d| now + d);
        Step::Done(bytes, principal)
    }

    /// RFC 4616: `[authzid] NUL authcid NUL passwd`, checked against the user's SCRAM
    /// credential (SHA-256 first, then SHA-512).
    fn plain(&self, token: &[u8]) -> Step {
        let failed = || Step::Failed("Authentication failed: Invalid username or password".into());
        let mut parts = token.split(|b| *b == 0);
        let (Some(authzid), Some(user), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Step::Failed("Invalid SASL/PLAIN response: expected 3 tokens".into());
        };
        let (Ok(authzid), Ok(user), Ok(password)) = (
            std::str::from_utf8(authzid),
            std::str::from_utf8(user),
            std::str::from_utf8(password),
        ) else {
            return failed();
        };
        if user.is_empty() || (!authzid.is_empty() && authzid != user) {
            return failed();
        }
        if self.store.verify_password(user, password) {
            Step::Done(Vec::new(), Principal::user(user))
        } else {
            failed()
        }
    }

    fn scram_first(&mut self, m: Mechanism, token: &[u8], raw: bool) -> Step {
        let first = match scram::parse_client_first(token) {
            Ok(f) => f,
            Err(e) => return Step::Failed(scram_failure(&e, "")),
        };
        let Some(cred) = self.store.get(&first.user, m) else {
            return Step::Failed(format!(
                "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                m.name()
            ));
        };
        let exchange = ServerExchange::new(m, cred, first);
        let server_first = exchange.server_first().to_vec();
        self.phase = Phase::ScramFinal {
            exchange: Box::new(exchange),
            raw,
        };
        Step::Challenge(server_first)
    }
}

fn scram_failure(e: &ScramError, user: &str) -> String {
    match e {
        ScramError::BadCredentials | ScramError::BadNonce => {
            format!(
                "Authentication failed during authentication due to invalid credentials (user '{user}'): {e}"
            )
        }
        _ => format!("Authentication failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(user: &str, pw: &str) -> (tempfile::TempDir, Arc<CredentialStore>) {
        let dir = tempfile::tempdir().unwrap();
        let store = CredentialStore::open(dir.path()).unwrap();
        let c = scram::new_credential(Mechanism::ScramSha256, pw, 4096).unwrap();
        store
            .apply(vec![(user.into(), Mechanism::ScramSha256, c)], vec![])
            .unwrap();
        (dir, Arc::new(store))
    }

    #[test]
    fn plain_checks_the_scram_credential_and_reauth_keeps_the_principal() {
        let (_d, store) = store_with("alice", "pw");
        let mut s = SaslSession::new(vec![Mechanism::Plain], store, 1000);
        let now = Instant::now();
        assert_eq!(
            s.handshake("SCRAM-SHA-512", 1),
            HandshakeOutcome::Unsupported
        );
        assert_eq!(s.handshake("PLAIN", 1), HandshakeOutcome::Accepted);
        assert!(matches!(
            s.authenticate(b"\0alice\0pw", now),
            Step::Done(..)
        ));
        assert!(s.is_authenticated() && !s.expired(now));
        assert!(s.expired(now + Duration::from_millis(1000)));
        assert_eq!(s.handshake("PLAIN", 1), HandshakeOutcome::Accepted);
        assert!(matches!(
            s.authenticate(b"\0alice\0wrong", now),
            Step::Failed(_)
        ));
        let (_d, store) = store_with("alice", "pw");
        let mut s = SaslSession::new(vec![Mechanism::Plain], store, 0);
        assert!(matches!(
            s.authenticate(b"\0alice\0pw", now),
            Step::Failed(_)
        ));
        assert_eq!(s.handshake("PLAIN", 0), HandshakeOutcome::Accepted);
        assert!(s.expects_raw_token());
        assert!(matches!(
            s.authenticate(b"bob\0alice\0pw", now),
            Step::Failed(_)
        ));
    }
}
