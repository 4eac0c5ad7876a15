//! One connection's SASL state on a SASL_PLAINTEXT / SASL_SSL listener: SaslHandshake (v0, then
//! raw tokens; v1, then SaslAuthenticate), PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER, and
//! re-authentication (KIP-368) once the session ends: after `connections.max.reauth.ms`, and for
//! OAUTHBEARER at the token's `exp` if that comes first. Until a client has authenticated only
//! ApiVersions, SaslHandshake and SaslAuthenticate are answered; anything else closes the
//! connection, as does a failed login (after its SASL_AUTHENTICATION_FAILED answer).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Mechanism;
use super::credentials::CredentialStore;
use super::jwt::{self, JwtValidator};
use super::oauthbearer;
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
    /// OAUTHBEARER: the token was refused and `{"status":"invalid_token"}` sent; waiting for the
    /// client's `%x01`, answered with SASL_AUTHENTICATION_FAILED.
    OAuthRefused { raw: bool },
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
    /// Checks OAUTHBEARER tokens (`None`: OAUTHBEARER is not enabled).
    oauthbearer: Option<Arc<JwtValidator>>,
    /// When the credential of the login in progress expires (an OAUTHBEARER token's `exp`).
    credential_expires_at: Option<Instant>,
    /// Why the last OAUTHBEARER token was refused, for the connection's log line.
    refusal: Option<String>,
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
            oauthbearer: None,
            credential_expires_at: None,
            refusal: None,
        }
    }

    /// Serve OAUTHBEARER (when enabled) with this token checker.
    pub fn with_oauthbearer(mut self, validator: Option<Arc<JwtValidator>>) -> Self {
        self.oauthbearer = validator;
        self
    }

    /// Why the last OAUTHBEARER token was refused (once).
    pub fn take_refusal(&mut self) -> Option<String> {
        self.refusal.take()
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
            Phase::Token { raw: true, .. }
                | Phase::ScramFinal { raw: true, .. }
                | Phase::OAuthRefused { raw: true }
        )
    }

    /// Whether a SaslAuthenticate is expected now.
    pub fn expects_authenticate(&self) -> bool {
        matches!(
            self.phase,
            Phase::Token { raw: false, .. }
                | Phase::ScramFinal { raw: false, .. }
                | Phase::OAuthRefused { raw: false }
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
            Phase::Token {
                mechanism: Mechanism::OAuthBearer,
                raw,
            } => self.oauthbearer(token, raw, now),
            Phase::OAuthRefused { .. } => {
                // Kafka's server fails the login on the client's %x01; anything else is not
                // a valid answer to the error either.
                Step::Failed(oauthbearer::INVALID_TOKEN_CHALLENGE.to_string())
            }
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
        let reauth_at = self.reauth.map(|d| now + d);
        // KIP-368: the session ends at the earlier of connections.max.reauth.ms and the
        // credential's own expiry.
        self.expires_at = match (reauth_at, self.credential_expires_at.take()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Step::Done(bytes, principal)
    }

    /// OAUTHBEARER (RFC 7628): the client initial response carries the token; a refused token
    /// is answered with the `invalid_token` error challenge first, as Kafka's server does.
    fn oauthbearer(&mut self, token: &[u8], raw: bool, now: Instant) -> Step {
        let Some(validator) = self.oauthbearer.clone() else {
            return Step::Failed("OAUTHBEARER is not configured on this broker".into());
        };
        let response = match oauthbearer::parse_client_response(token) {
            Ok(r) => r,
            Err(e) => {
                self.refusal = Some(e.to_string());
                return Step::Failed(
                    "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER".into(),
                );
            }
        };
        let valid = match validator.validate(&response.token) {
            Ok(v) => v,
            Err(e) => {
                self.refusal = Some(e.to_string());
                self.phase = Phase::OAuthRefused { raw };
                return Step::Challenge(oauthbearer::INVALID_TOKEN_CHALLENGE.as_bytes().to_vec());
            }
        };
        if !response.authzid.is_empty() && response.authzid != valid.principal {
            return Step::Failed(format!(
                "Authentication failed: Client requested an authorization id ({}) that is different from the token's principal name ({})",
                response.authzid, valid.principal
            ));
        }
        let left_ms = valid
            .expires_at_ms
            .saturating_sub(jwt::unix_now_ms())
            .max(0);
        self.credential_expires_at = Some(now + Duration::from_millis(left_ms as u64));
        Step::Done(Vec::new(), Principal::user(valid.principal))
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

    #[test]
    fn oauthbearer_answers_invalid_token_then_fails_and_the_session_ends_at_exp() {
        use crate::security::jwt::tests::{Signer, claims, validator, write_jwks};
        let dir = tempfile::tempdir().unwrap();
        let signer = Signer::es256("k1");
        let v = validator(write_jwks(dir.path(), &[&signer]), |_| {});
        let (_d, store) = store_with("alice", "pw");
        let new_session = |reauth_ms| {
            SaslSession::new(vec![Mechanism::OAuthBearer], store.clone(), reauth_ms)
                .with_oauthbearer(Some(v.clone()))
        };
        let response = |t: &str| format!("n,,\x01auth=Bearer {t}\x01\x01").into_bytes();
        let now = Instant::now();
        let mut s = new_session(0);
        assert_eq!(s.handshake("OAUTHBEARER", 1), HandshakeOutcome::Accepted);
        let expired = signer.sign(&claims("alice", -120));
        match s.authenticate(&response(&expired), now) {
            Step::Challenge(c) => assert_eq!(c, br#"{"status":"invalid_token"}"#),
            other => panic!("{other:?}"),
        }
        assert!(s.take_refusal().unwrap().contains("ExpiredSignature"));
        assert!(s.expects_authenticate());
        assert!(
            matches!(s.authenticate(b"\x01", now), Step::Failed(m) if m.contains("invalid_token"))
        );
        assert!(!s.is_authenticated());

        // A 60 s token with a 1000 s reauth limit: the session ends at exp.
        let mut s = new_session(1_000_000);
        assert_eq!(s.handshake("OAUTHBEARER", 1), HandshakeOutcome::Accepted);
        let good = signer.sign(&claims("alice", 60));
        assert!(
            matches!(s.authenticate(&response(&good), now), Step::Done(_, p) if p.name == "alice")
        );
        let left = s.session_lifetime_ms(now);
        assert!((55_000..=60_000).contains(&left), "{left}");
        // Re-authentication must keep the principal.
        assert_eq!(s.handshake("OAUTHBEARER", 1), HandshakeOutcome::Accepted);
        let bob = signer.sign(&claims("bob", 60));
        assert!(
            matches!(s.authenticate(&response(&bob), now), Step::Failed(m) if m.contains("principals"))
        );

        // A 1 s reauth limit comes before exp; a garbage response and a wrong authzid fail.
        let mut s = new_session(1000);
        assert_eq!(s.handshake("OAUTHBEARER", 1), HandshakeOutcome::Accepted);
        assert!(matches!(
            s.authenticate(&response(&good), now),
            Step::Done(..)
        ));
        assert_eq!(s.session_lifetime_ms(now), 1000);
        let mut s = new_session(0);
        assert_eq!(s.handshake("OAUTHBEARER", 1), HandshakeOutcome::Accepted);
        assert!(matches!(s.authenticate(b"garbage", now), Step::Failed(_)));
        let mut s = new_session(0);
        assert_eq!(s.handshake("OAUTHBEARER", 1), HandshakeOutcome::Accepted);
        let with_authzid = format!("n,a=bob,\x01auth=Bearer {good}\x01\x01");
        assert!(
            matches!(s.authenticate(with_authzid.as_bytes(), now), Step::Failed(m) if m.contains("authorization id"))
        );
    }
}
