//! `streamforge broker`'s dashboard login flags: `--http-auth`, `--http-session-timeout-ms`,
//! `--http-metrics-auth` (flags over the TOML file's `http_auth`, `http_session_timeout_ms`,
//! `http_metrics_auth`).

use anyhow::Context;
use streamforge_broker::http_auth::HttpAuthConfig;

#[derive(clap::Args, Debug, Default)]
pub struct HttpAuthArgs {
    /// Dashboard and /api login: `auto` (when any listener speaks SASL) or `required`; users
    /// are the broker's SASL/SCRAM users [default: auto].
    #[arg(long, env = "STREAMFORGE_HTTP_AUTH")]
    pub http_auth: Option<String>,
    /// A dashboard login session unused this many ms ends [default: 3600000].
    #[arg(long, env = "STREAMFORGE_HTTP_SESSION_TIMEOUT_MS")]
    pub http_session_timeout_ms: Option<u64>,
    /// `/metrics` with a login on: `none` (open, for Prometheus) or `required` (Basic auth)
    /// [default: none].
    #[arg(long, env = "STREAMFORGE_HTTP_METRICS_AUTH")]
    pub http_metrics_auth: Option<String>,
}

/// The file's values of the same settings.
#[derive(Debug, Default)]
pub struct FileValues {
    pub http_auth: Option<String>,
    pub http_session_timeout_ms: Option<u64>,
    pub http_metrics_auth: Option<String>,
}

pub fn resolve(
    args: &HttpAuthArgs,
    file: FileValues,
    out: &mut HttpAuthConfig,
) -> anyhow::Result<()> {
    if let Some(mode) = args.http_auth.clone().or(file.http_auth) {
        out.mode = mode
            .parse()
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("--http-auth {mode}"))?;
    }
    if let Some(ms) = args
        .http_session_timeout_ms
        .or(file.http_session_timeout_ms)
    {
        anyhow::ensure!(ms > 0, "--http-session-timeout-ms must be positive");
        out.session_timeout_ms = ms;
    }
    if let Some(m) = args.http_metrics_auth.clone().or(file.http_metrics_auth) {
        out.metrics_auth_required = match m.trim().to_ascii_lowercase().as_str() {
            "none" => false,
            "required" => true,
            _ => anyhow::bail!("--http-metrics-auth {m}: want none or required"),
        };
    }
    Ok(())
}

/// The settings as `--print-config` writes them.
pub fn print(c: &HttpAuthConfig, put: &mut impl FnMut(&str, toml::Value)) {
    put("http_auth", toml::Value::String(c.mode.to_string()));
    put(
        "http_session_timeout_ms",
        toml::Value::Integer(c.session_timeout_ms.min(i64::MAX as u64) as i64),
    );
    let metrics = if c.metrics_auth_required {
        "required"
    } else {
        "none"
    };
    put("http_metrics_auth", toml::Value::String(metrics.into()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamforge_broker::http_auth::HttpAuthMode;

    #[test]
    fn flags_over_file_and_bad_values_refused() {
        let mut c = HttpAuthConfig::default();
        let args = HttpAuthArgs {
            http_auth: Some("required".into()),
            ..Default::default()
        };
        let file = FileValues {
            http_auth: Some("auto".into()),
            http_session_timeout_ms: Some(5_000),
            http_metrics_auth: Some("required".into()),
        };
        resolve(&args, file, &mut c).unwrap();
        assert_eq!(c.mode, HttpAuthMode::Required);
        assert_eq!(c.session_timeout_ms, 5_000);
        assert!(c.metrics_auth_required);
        let bad = HttpAuthArgs {
            http_metrics_auth: Some("maybe".into()),
            ..Default::default()
        };
        assert!(resolve(&bad, FileValues::default(), &mut c).is_err());
        let bad = HttpAuthArgs {
            http_auth: Some("none".into()),
            ..Default::default()
        };
        assert!(resolve(&bad, FileValues::default(), &mut c).is_err());
    }
}
