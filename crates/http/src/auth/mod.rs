//! Who may use the dashboard: a login (session cookie) or `Authorization: Basic` checked
//! against the broker's user store, a CSRF check on state-changing requests, and an
//! authorization hook asked before every action.
//!
//! The http crate knows neither the credential store nor the ACLs: the broker hands it a
//! [`VerifyPasswordFn`] (PBKDF2 against the SCRAM credentials, run off the async threads) and
//! an [`AuthorizeFn`] (every authenticated user may do everything until an ACL authorizer is
//! plugged in). See docs/DASHBOARD.md, "Login and authorization".

mod actions;
mod gate;
mod login;
mod session;

use std::sync::Arc;

pub use actions::{Action, Operation, Resource, UnknownRoute, route_action};
pub(crate) use gate::{Caller, authorize_route, gate};
pub(crate) use login::{login_form, login_submit, logout, whoami};
pub use session::{SESSION_COOKIE, SESSION_ID_BYTES, SessionTable};

/// Checks a user name and password; blocking (PBKDF2), so the http crate calls it on the
/// blocking pool.
pub type VerifyPasswordFn = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// The authorization hook: may `principal` do `action`? Asked before every action; a `false`
/// answers 403 with Kafka's error name (`TOPIC_AUTHORIZATION_FAILED`, ...).
pub type AuthorizeFn = Arc<dyn Fn(&Principal, &Action) -> bool + Send + Sync>;

/// The default hook: every caller that got past authentication may do everything (as Kafka
/// without `authorizer.class.name`).
pub fn allow_all() -> AuthorizeFn {
    Arc::new(|_, _| true)
}

/// Default of `--http-session-timeout-ms`: a session unused for this long ends.
pub const SESSION_TIMEOUT_MS_DEFAULT: u64 = 3_600_000;
/// Most live login sessions; past it the least recently used one ends.
pub const SESSIONS_MAX_DEFAULT: usize = 10_000;
/// Password checks (PBKDF2, a few ms of CPU each) running at once; the rest wait.
pub const PASSWORD_CHECKS_CONCURRENT_MAX: usize = 4;

/// Kafka's principal, `User:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub name: String,
}

impl Principal {
    pub fn user(name: impl Into<String>) -> Principal {
        Principal { name: name.into() }
    }

    /// The principal of a request when the dashboard has no login (as Kafka's PLAINTEXT).
    pub fn anonymous() -> Principal {
        Principal::user("ANONYMOUS")
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "User:{}", self.name)
    }
}

/// The dashboard's login settings (`None` in [`crate::HttpOptions::auth`] = no login).
#[derive(Clone)]
pub struct HttpAuth {
    pub verify_password: VerifyPasswordFn,
    /// `--http-session-timeout-ms`: a session unused for this long ends.
    pub session_timeout_ms: u64,
    /// Most live sessions (the table is bounded; the least recently used one goes first).
    pub sessions_max: usize,
    /// `--http-metrics-auth required`: `/metrics` takes the same Basic auth (default: open,
    /// for Prometheus).
    pub metrics_auth_required: bool,
}

impl HttpAuth {
    pub fn new(verify_password: VerifyPasswordFn) -> HttpAuth {
        HttpAuth {
            verify_password,
            session_timeout_ms: SESSION_TIMEOUT_MS_DEFAULT,
            sessions_max: SESSIONS_MAX_DEFAULT,
            metrics_auth_required: false,
        }
    }
}

impl std::fmt::Debug for HttpAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpAuth")
            .field("session_timeout_ms", &self.session_timeout_ms)
            .field("sessions_max", &self.sessions_max)
            .field("metrics_auth_required", &self.metrics_auth_required)
            .finish()
    }
}

/// What every request's gate shares.
pub struct AuthState {
    pub login: Option<Login>,
    pub authorizer: AuthorizeFn,
}

/// The login half of [`AuthState`], present when a login is required.
pub struct Login {
    pub config: HttpAuth,
    pub sessions: SessionTable,
    pub password_checks: tokio::sync::Semaphore,
}

impl AuthState {
    pub fn new(auth: Option<HttpAuth>, authorizer: Option<AuthorizeFn>) -> AuthState {
        AuthState {
            login: auth.map(|config| Login {
                sessions: SessionTable::new(
                    std::time::Duration::from_millis(config.session_timeout_ms),
                    config.sessions_max,
                ),
                config,
                password_checks: tokio::sync::Semaphore::new(PASSWORD_CHECKS_CONCURRENT_MAX),
            }),
            authorizer: authorizer.unwrap_or_else(allow_all),
        }
    }
}

impl Login {
    /// Runs the (blocking) password check on the blocking pool, at most
    /// [`PASSWORD_CHECKS_CONCURRENT_MAX`] at once.
    pub async fn check_password(&self, user: String, password: String) -> bool {
        if user.is_empty() || user.len() > USER_NAME_BYTES_MAX {
            return false;
        }
        let Ok(_permit) = self.password_checks.acquire().await else {
            return false;
        };
        let verify = Arc::clone(&self.config.verify_password);
        tokio::task::spawn_blocking(move || verify(&user, &password))
            .await
            .unwrap_or(false)
    }
}

/// Longest user name a login or Basic header may carry (the broker's store has the same bound).
pub const USER_NAME_BYTES_MAX: usize = 256;
