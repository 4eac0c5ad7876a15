//! JWT validation for SASL/OAUTHBEARER, as Kafka's broker-side `BrokerJwtValidator` (KIP-768)
//! does it: the signature checked against a key of a JWKS file (`kid`, `alg`), `exp` and `iat`
//! required, `nbf` honoured, each within `sasl.oauthbearer.clock.skew.seconds`, the expected
//! issuer and audience when configured, and the principal from the subject claim.
//! Signatures are asymmetric only (RS*, PS*, ES256/384, EdDSA): a JWKS holds public keys, and
//! accepting HMAC would let anyone who can read the JWKS mint tokens.
//! The JWKS file is checked every `jwks_refresh_ms` and when a token names an unknown `kid`;
//! a changed file is loaded without restart (a broken one is logged and the old keys kept).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Validation};
use parking_lot::RwLock;
use serde_json::Value;
use tokio::sync::watch;

use super::SASL_RECEIVE_BYTES_MAX;

/// Largest JWKS file read (a provider's set is a few KiB).
pub const JWKS_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// Most keys kept from one JWKS file; a token without `kid` is tried against at most these.
pub const JWKS_KEYS_MAX: usize = 256;
/// Kafka's `sasl.oauthbearer.clock.skew.seconds` default.
pub const CLOCK_SKEW_SECONDS_DEFAULT: u64 = 30;
/// How often the JWKS file is checked for changes by default (a `stat`; it is read only when
/// its modification time or length changed).
pub const JWKS_REFRESH_MS_DEFAULT: u64 = 10_000;
/// The signature algorithms accepted.
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The `sasl.oauthbearer.*` settings of the broker.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// The JWKS (`{"keys":[...]}`) tokens are checked against; `sasl.oauthbearer.jwks.endpoint.url`
    /// with a `file:` URL names it too.
    pub jwks_file: Option<PathBuf>,
    /// How often the file is checked for changes; 0 = only when a token names an unknown `kid`.
    pub jwks_refresh_ms: u64,
    pub clock_skew_seconds: u64,
    /// `iss` must be this when set.
    pub expected_issuer: Option<String>,
    /// `aud` must contain one of these when not empty.
    pub expected_audience: Vec<String>,
    /// The claim that names the principal.
    pub sub_claim_name: String,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            jwks_file: None,
            jwks_refresh_ms: JWKS_REFRESH_MS_DEFAULT,
            clock_skew_seconds: CLOCK_SKEW_SECONDS_DEFAULT,
            expected_issuer: None,
            expected_audience: Vec::new(),
            sub_claim_name: "sub".to_string(),
        }
    }
}

/// The path of `sasl.oauthbearer.jwks.endpoint.url`, which must be a `file:` URL here.
pub fn jwks_path_from_url(text: &str) -> Result<PathBuf, JwksError> {
    let url = url::Url::parse(text.trim()).map_err(|e| JwksError::Url(format!("{text}: {e}")))?;
    if url.scheme() != "file" {
        return Err(JwksError::Url(format!(
            "{text}: only file: URLs are served (the broker does not fetch keys over the network)"
        )));
    }
    url.to_file_path()
        .map_err(|()| JwksError::Url(format!("{text}: not a local file path")))
}

#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error(
        "OAUTHBEARER needs --sasl-oauthbearer-jwks-file (or sasl.oauthbearer.jwks.endpoint.url = \"file:...\")"
    )]
    MissingFile,
    #[error("sasl.oauthbearer.jwks.endpoint.url {0}")]
    Url(String),
    #[error("JWKS {}: {message}", path.display())]
    File { path: PathBuf, message: String },
}

/// Why a token was refused (logged with the peer; the client only sees `invalid_token`).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("token of {0} bytes is larger than {SASL_RECEIVE_BYTES_MAX}")]
    TooLarge(usize),
    #[error("malformed JWT: {0}")]
    Malformed(jsonwebtoken::errors::Error),
    #[error("algorithm {0:?} is not accepted (asymmetric signatures only)")]
    Algorithm(Algorithm),
    #[error("no key in the JWKS for kid {0:?} and algorithm {1:?}")]
    UnknownKey(Option<String>, Algorithm),
    #[error("could not validate the access token: {0}")]
    Invalid(jsonwebtoken::errors::Error),
    #[error("claim '{0}' is missing or malformed")]
    Claim(String),
    #[error("iat {0} is in the future")]
    IssuedInFuture(i64),
}

/// A validated token: who it names and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidToken {
    pub principal: String,
    /// `exp` in milliseconds since the Unix epoch.
    pub expires_at_ms: i64,
}

struct Key {
    kid: Option<String>,
    /// The JWK's `alg`, when it names one: a token must then use exactly that.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

impl Key {
    fn fits(&self, kid: Option<&str>, alg: Algorithm) -> bool {
        let kid_ok = kid.is_none_or(|k| self.kid.as_deref() == Some(k));
        kid_ok && self.alg.is_none_or(|a| a == alg) && self.key.family() == alg.family()
    }
}

/// Modification time and length of the JWKS file (`None`: unreadable).
type Fingerprint = Option<(SystemTime, u64)>;

fn fingerprint(path: &Path) -> Fingerprint {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Checks tokens against the keys of the JWKS file, reloaded when it changes.
pub struct JwtValidator {
    path: PathBuf,
    config: OAuthConfig,
    current: RwLock<(Arc<Vec<Key>>, Fingerprint)>,
}

impl JwtValidator {
    pub fn load(config: &OAuthConfig) -> Result<Arc<JwtValidator>, JwksError> {
        let path = config.jwks_file.clone().ok_or(JwksError::MissingFile)?;
        let print = fingerprint(&path);
        let keys = read_jwks(&path)?;
        Ok(Arc::new(JwtValidator {
            path,
            config: config.clone(),
            current: RwLock::new((Arc::new(keys), print)),
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Load the file again if it changed. `Ok(true)` = reloaded.
    pub fn reload_if_changed(&self) -> Result<bool, JwksError> {
        let print = fingerprint(&self.path);
        if self.current.read().1 == print {
            return Ok(false);
        }
        let result = read_jwks(&self.path);
        let mut current = self.current.write();
        // A broken file is reported once per change, not on every check.
        current.1 = print;
        current.0 = Arc::new(result?);
        Ok(true)
    }

    /// Validate a bearer token. Runs signature checks: call it off the async threads.
    pub fn validate(&self, token: &str) -> Result<ValidToken, TokenError> {
        if token.len() > SASL_RECEIVE_BYTES_MAX {
            return Err(TokenError::TooLarge(token.len()));
        }
        let header = jsonwebtoken::decode_header(token).map_err(TokenError::Malformed)?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(TokenError::Algorithm(header.alg));
        }
        let kid = header.kid.as_deref();
        let mut keys = self.current.read().0.clone();
        if !keys.iter().any(|k| k.fits(kid, header.alg)) {
            // A new signing key may have been published: look at the file once more.
            if let Err(e) = self.reload_if_changed() {
                tracing::error!(error = %e, "JWKS reload failed; keeping the previous keys");
            }
            keys = self.current.read().0.clone();
        }
        let validation = self.validation(header.alg);
        let mut last = None;
        for key in keys.iter().filter(|k| k.fits(kid, header.alg)) {
            match jsonwebtoken::decode::<serde_json::Map<String, Value>>(
                token,
                &key.key,
                &validation,
            ) {
                Ok(data) => return self.check_claims(&data.claims),
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or(
            TokenError::UnknownKey(header.kid.clone(), header.alg),
            TokenError::Invalid,
        ))
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let c = &self.config;
        let mut v = Validation::new(alg);
        v.leeway = c.clock_skew_seconds;
        v.validate_nbf = true;
        let mut required = vec!["exp"];
        if let Some(iss) = &c.expected_issuer {
            v.set_issuer(&[iss]);
            required.push("iss");
        }
        // Kafka checks `aud` only when an expected audience is configured.
        v.validate_aud = !c.expected_audience.is_empty();
        if v.validate_aud {
            v.set_audience(&c.expected_audience);
            required.push("aud");
        }
        v.set_required_spec_claims(&required);
        v
    }

    /// What the library does not check: `iat` present and not in the future, the subject.
    fn check_claims(
        &self,
        claims: &serde_json::Map<String, Value>,
    ) -> Result<ValidToken, TokenError> {
        let seconds = |name: &str| {
            claims
                .get(name)
                .and_then(Value::as_f64)
                .filter(|v| v.is_finite())
                .ok_or_else(|| TokenError::Claim(name.to_string()))
        };
        let iat = seconds("iat")? as i64;
        let now = unix_now_s();
        if iat > now.saturating_add(self.config.clock_skew_seconds as i64) {
            return Err(TokenError::IssuedInFuture(iat));
        }
        let exp = seconds("exp")?;
        let name = &self.config.sub_claim_name;
        let principal = claims
            .get(name)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| TokenError::Claim(name.clone()))?;
        Ok(ValidToken {
            principal: principal.to_string(),
            expires_at_ms: (exp * 1000.0) as i64,
        })
    }
}

pub fn unix_now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub fn unix_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The usable keys of a JWKS file: public keys with a supported key type. Others (symmetric
/// `oct` keys, unknown types) are skipped with a warning.
fn read_jwks(path: &Path) -> Result<Vec<Key>, JwksError> {
    let err = |message: String| JwksError::File {
        path: path.to_path_buf(),
        message,
    };
    let len = std::fs::metadata(path)
        .map_err(|e| err(e.to_string()))?
        .len();
    if len > JWKS_FILE_BYTES_MAX {
        return Err(err(format!("{len} bytes, more than {JWKS_FILE_BYTES_MAX}")));
    }
    let text = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let set: JwkSet = serde_json::from_slice(&text).map_err(|e| err(format!("not a JWKS: {e}")))?;
    if set.keys.len() > JWKS_KEYS_MAX {
        return Err(err(format!(
            "{} keys, more than {JWKS_KEYS_MAX}",
            set.keys.len()
        )));
    }
    let mut keys = Vec::with_capacity(set.keys.len());
    for jwk in &set.keys {
        let kid = jwk.common.key_id.clone();
        if matches!(
            jwk.algorithm,
            AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_)
        ) {
            tracing::warn!(?kid, path = %path.display(), "JWKS key skipped: not an RSA, EC or OKP public key");
            continue;
        }
        let alg = match jwk.common.key_algorithm.map(Algorithm::try_from) {
            None => None,
            Some(Ok(a)) => Some(a),
            Some(Err(e)) => {
                tracing::warn!(?kid, error = %e, "JWKS key skipped: unsupported alg");
                continue;
            }
        };
        match DecodingKey::from_jwk(jwk) {
            Ok(key) if key.family() != AlgorithmFamily::Hmac => keys.push(Key { kid, alg, key }),
            Ok(_) => {}
            Err(e) => tracing::warn!(?kid, error = %e, "JWKS key skipped"),
        }
    }
    if keys.is_empty() {
        return Err(err("no usable public key".into()));
    }
    Ok(keys)
}

/// Check the JWKS file every `interval_ms` until shutdown.
pub async fn run_reloader(
    validator: Arc<JwtValidator>,
    interval_ms: u64,
    shutdown: watch::Receiver<bool>,
) {
    let messages = super::reload::ReloadMessages {
        file: validator.path.display().to_string(),
        reloaded: "JWKS reloaded",
        failed: "JWKS reload failed; keeping the previous keys",
        task_failed: "JWKS reload task failed",
    };
    super::reload::run_file_reloader(interval_ms, shutdown, messages, move || {
        validator.reload_if_changed()
    })
    .await;
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
pub(crate) mod tests;
