//! `streamforge broker`'s SASL/OAUTHBEARER settings (Kafka's `sasl.oauthbearer.*`): flags and
//! `STREAMFORGE_*` variables here, the same keys in the `--config` file.

use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;
use streamforge_broker::security::jwt::{OAuthConfig, jwks_path_from_url};

/// The flags; the `--config` file has the same keys (`sasl_oauthbearer_jwks_file`, ...) and
/// Kafka's names (`sasl.oauthbearer.jwks.endpoint.url`, ...).
#[derive(clap::Args, Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthArgs {
    /// OAUTHBEARER: JWKS file (`{"keys":[...]}`) token signatures are checked against;
    /// reloaded when it changes.
    #[arg(long, env = "STREAMFORGE_SASL_OAUTHBEARER_JWKS_FILE")]
    pub sasl_oauthbearer_jwks_file: Option<PathBuf>,
    /// `sasl.oauthbearer.jwks.endpoint.url`: the same as a `file:` URL (other schemes are refused).
    #[arg(long, env = "STREAMFORGE_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL")]
    pub sasl_oauthbearer_jwks_endpoint_url: Option<String>,
    /// How often the JWKS file is checked for changes, 0 = only on an unknown kid [default: 10000].
    #[arg(long, env = "STREAMFORGE_SASL_OAUTHBEARER_JWKS_REFRESH_MS")]
    pub sasl_oauthbearer_jwks_refresh_ms: Option<u64>,
    /// `sasl.oauthbearer.clock.skew.seconds`: leeway for exp, nbf and iat [default: 30].
    #[arg(long, env = "STREAMFORGE_SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS")]
    pub sasl_oauthbearer_clock_skew_seconds: Option<u64>,
    /// `sasl.oauthbearer.expected.issuer`: the `iss` tokens must carry [default: not checked].
    #[arg(long, env = "STREAMFORGE_SASL_OAUTHBEARER_EXPECTED_ISSUER")]
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// `sasl.oauthbearer.expected.audience`: comma-separated; `aud` must hold one [default: not checked].
    #[arg(long, env = "STREAMFORGE_SASL_OAUTHBEARER_EXPECTED_AUDIENCE")]
    pub sasl_oauthbearer_expected_audience: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name`: the claim naming the principal [default: sub].
    #[arg(long, env = "STREAMFORGE_SASL_OAUTHBEARER_SUB_CLAIM_NAME")]
    pub sasl_oauthbearer_sub_claim_name: Option<String>,
}

impl OAuthArgs {
    /// Each setting from `self` (flags, env), else from `file`.
    fn or(&self, file: &OAuthArgs) -> OAuthArgs {
        macro_rules! pick {
            ($($f:ident),*) => { OAuthArgs { $($f: self.$f.clone().or_else(|| file.$f.clone()),)* } };
        }
        pick!(
            sasl_oauthbearer_jwks_file,
            sasl_oauthbearer_jwks_endpoint_url,
            sasl_oauthbearer_jwks_refresh_ms,
            sasl_oauthbearer_clock_skew_seconds,
            sasl_oauthbearer_expected_issuer,
            sasl_oauthbearer_expected_audience,
            sasl_oauthbearer_sub_claim_name
        )
    }
}

/// Apply flags over the file to `config`.
pub fn apply(config: &mut OAuthConfig, args: &OAuthArgs, file: &OAuthArgs) -> anyhow::Result<()> {
    let a = args.or(file);
    let from_url = match &a.sasl_oauthbearer_jwks_endpoint_url {
        Some(u) => Some(jwks_path_from_url(u).context("--sasl-oauthbearer-jwks-endpoint-url")?),
        None => None,
    };
    if let (Some(f), Some(u)) = (&a.sasl_oauthbearer_jwks_file, &from_url) {
        anyhow::ensure!(
            f == u,
            "--sasl-oauthbearer-jwks-file {} and --sasl-oauthbearer-jwks-endpoint-url name different files",
            f.display()
        );
    }
    if let Some(f) = a.sasl_oauthbearer_jwks_file.or(from_url) {
        config.jwks_file = Some(f);
    }
    if let Some(v) = a.sasl_oauthbearer_jwks_refresh_ms {
        config.jwks_refresh_ms = v;
    }
    if let Some(v) = a.sasl_oauthbearer_clock_skew_seconds {
        config.clock_skew_seconds = v;
    }
    if let Some(v) = a.sasl_oauthbearer_expected_issuer {
        config.expected_issuer = Some(v);
    }
    if let Some(v) = a.sasl_oauthbearer_expected_audience {
        config.expected_audience = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
    }
    if let Some(v) = a.sasl_oauthbearer_sub_claim_name {
        anyhow::ensure!(
            !v.trim().is_empty(),
            "--sasl-oauthbearer-sub-claim-name is empty"
        );
        config.sub_claim_name = v;
    }
    Ok(())
}

/// The settings as `--config` keys (for `broker --print-config`).
pub fn print(config: &OAuthConfig, put: &mut dyn FnMut(&str, toml::Value)) {
    let s = |v: &str| toml::Value::String(v.to_string());
    if let Some(f) = &config.jwks_file {
        put("sasl_oauthbearer_jwks_file", s(&f.display().to_string()));
    }
    let int = |v: u64| toml::Value::Integer(i64::try_from(v).unwrap_or(i64::MAX));
    put(
        "sasl_oauthbearer_jwks_refresh_ms",
        int(config.jwks_refresh_ms),
    );
    put(
        "sasl_oauthbearer_clock_skew_seconds",
        int(config.clock_skew_seconds),
    );
    if let Some(i) = &config.expected_issuer {
        put("sasl_oauthbearer_expected_issuer", s(i));
    }
    if !config.expected_audience.is_empty() {
        put(
            "sasl_oauthbearer_expected_audience",
            s(&config.expected_audience.join(",")),
        );
    }
    put("sasl_oauthbearer_sub_claim_name", s(&config.sub_claim_name));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_over_the_file_and_file_urls() {
        let file = OAuthArgs {
            sasl_oauthbearer_jwks_endpoint_url: Some("file:///etc/sf/jwks.json".into()),
            sasl_oauthbearer_expected_audience: Some("kafka, other".into()),
            sasl_oauthbearer_clock_skew_seconds: Some(5),
            ..OAuthArgs::default()
        };
        let flags = OAuthArgs {
            sasl_oauthbearer_clock_skew_seconds: Some(7),
            sasl_oauthbearer_sub_claim_name: Some("client_id".into()),
            ..OAuthArgs::default()
        };
        let mut c = OAuthConfig::default();
        apply(&mut c, &flags, &file).unwrap();
        assert_eq!(c.jwks_file, Some(PathBuf::from("/etc/sf/jwks.json")));
        assert_eq!(c.expected_audience, vec!["kafka", "other"]);
        assert_eq!(c.clock_skew_seconds, 7);
        assert_eq!(c.sub_claim_name, "client_id");
        let https = OAuthArgs {
            sasl_oauthbearer_jwks_endpoint_url: Some("https://idp/jwks".into()),
            ..OAuthArgs::default()
        };
        assert!(apply(&mut c, &https, &OAuthArgs::default()).is_err());
        let both = OAuthArgs {
            sasl_oauthbearer_jwks_file: Some("/other.json".into()),
            ..OAuthArgs::default()
        };
        assert!(apply(&mut c, &both, &file).is_err());
    }
}
