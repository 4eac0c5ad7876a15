//! The middleware in front of every route: the CSRF check on state-changing requests, then
//! who the caller is (session cookie or `Authorization: Basic`), then, for `/api`, the
//! authorization hook with the route's action.

use std::sync::Arc;

use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use super::{Action, AuthState, Login, Principal, SESSION_COOKIE, route_action};
use crate::routes::{ApiError, AppState};

/// Who is asking, put in the request's extensions by [`gate`] for the handlers.
#[derive(Clone)]
pub struct Caller {
    pub principal: Principal,
    auth: Arc<AuthState>,
}

impl Caller {
    /// The hook's answer.
    pub fn allows(&self, action: &Action) -> bool {
        (self.auth.authorizer)(&self.principal, action)
    }

    /// 403 with Kafka's error name unless the hook allows `action`.
    pub fn check(&self, action: Action) -> Result<(), ApiError> {
        if self.allows(&action) {
            return Ok(());
        }
        tracing::info!(principal = %self.principal, ?action, "dashboard action denied");
        let error = action.denied_error();
        Err(ApiError {
            status: StatusCode::FORBIDDEN,
            message: format!(
                "{} is not authorized to {:?} {:?}",
                self.principal, action.operation, action.resource
            ),
            kafka: Some((crate::kafka_error::name(error), error.code())),
        })
    }

    /// Whether the dashboard asks for a login.
    pub fn login_required(&self) -> bool {
        self.auth.login.is_some()
    }
}

/// Everything before a handler: CSRF, authentication, the caller in the extensions.
pub async fn gate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    if !is_safe(request.method())
        && let Err(why) = same_origin(request.headers())
    {
        tracing::warn!(%why, path = %request.uri().path(), "dashboard refused a cross-site request");
        return json_error(
            StatusCode::FORBIDDEN,
            &format!("cross-site request refused ({why})"),
        );
    }
    let auth = Arc::clone(&state.auth);
    let path = request.uri().path();
    let principal = match &auth.login {
        None => Principal::anonymous(),
        Some(login) if is_public(path, login) => return next.run(request).await,
        Some(login) => match authenticate(login, request.headers()).await {
            Ok(Some(principal)) => principal,
            Ok(None) => return unauthenticated(&request),
            Err(()) => {
                return ApiError {
                    status: StatusCode::UNAUTHORIZED,
                    message: "Authentication failed: Invalid username or password".into(),
                    kafka: Some(("SASL_AUTHENTICATION_FAILED".into(), 58)),
                }
                .into_response();
            }
        },
    };
    request.extensions_mut().insert(Caller { principal, auth });
    next.run(request).await
}

/// The authorization hook for `/api` routes (a route layer, so the matched route is known).
pub async fn authorize_route(
    matched: MatchedPath,
    params: RawPathParams,
    request: Request,
    next: Next,
) -> Response {
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no caller on the request",
        );
    };
    let param = |key: &str| params.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
    match route_action(request.method(), matched.as_str(), param) {
        Err(_) => json_error(
            StatusCode::FORBIDDEN,
            &format!("no authorization rule for {}", matched.as_str()),
        ),
        Ok(Some(action)) => match caller.check(action) {
            Ok(()) => next.run(request).await,
            Err(e) => e.into_response(),
        },
        Ok(None) => next.run(request).await,
    }
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Paths served without a login: the login page itself, logout, health, the UI's static files
/// (no data in them) and, unless `--http-metrics-auth required`, `/metrics`.
fn is_public(path: &str, login: &Login) -> bool {
    matches!(path, "/login" | "/logout" | "/healthz")
        || path.starts_with("/static/")
        || (path == "/metrics" && !login.config.metrics_auth_required)
}

/// The CSRF defence besides the SameSite=Strict cookie: a browser says where a request comes
/// from (`Sec-Fetch-Site`, or `Origin` in older ones); only same-origin (or typed-in, `none`)
/// state changes pass. A client sending neither header is not a browser and passes.
fn same_origin(headers: &HeaderMap) -> Result<(), String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("?");
        return match site {
            "same-origin" | "none" => Ok(()),
            other => Err(format!("Sec-Fetch-Site: {other}")),
        };
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("null");
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (authority, host) {
        (Some(a), Some(h)) if a.eq_ignore_ascii_case(h) => Ok(()),
        _ => Err(format!("Origin: {origin}")),
    }
}

/// `Ok(None)`: no credentials; `Err`: a Basic header with a wrong user or password.
async fn authenticate(login: &Login, headers: &HeaderMap) -> Result<Option<Principal>, ()> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let (user, password) = basic_credentials(value.to_str().map_err(|_| ())?).ok_or(())?;
        return if login.check_password(user.clone(), password).await {
            Ok(Some(Principal::user(user)))
        } else {
            tracing::info!(%user, "dashboard Basic authentication failed");
            Err(())
        };
    }
    Ok(session_id(headers).and_then(|id| login.sessions.touch(&id)))
}

/// `Basic base64(user:password)`.
fn basic_credentials(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// The session id of the request's cookie, if any.
pub(crate) fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.to_string())
}

/// 401 JSON for the API and `/metrics`; pages go to the login page.
fn unauthenticated(request: &Request) -> Response {
    let path = request.uri().path();
    let is_api = path == "/api" || path.starts_with("/api/") || path == "/metrics";
    if is_api || request.method() != Method::GET {
        let mut response = json_error(
            StatusCode::UNAUTHORIZED,
            "authentication required: log in at /login, or send Authorization: Basic",
        );
        // Browsers would pop up their own password dialog for a Basic challenge; they say
        // who they are with Sec-Fetch-Mode, and get the login page instead.
        if !request.headers().contains_key("sec-fetch-mode") {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"StreamForge\", charset=\"UTF-8\""),
            );
        }
        return response;
    }
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let location = format!("/login?next={}", percent_encode(target));
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

fn json_error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

/// Percent-encodes everything but unreserved characters and `/`.
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_and_cookie_parsing() {
        let h = base64::engine::general_purpose::STANDARD.encode("alice:pa:ss");
        assert_eq!(
            basic_credentials(&format!("Basic {h}")),
            Some(("alice".into(), "pa:ss".into()))
        );
        assert_eq!(basic_credentials("Bearer xyz"), None);
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, "a=1; sf_session=abc; b=2".parse().unwrap());
        assert_eq!(session_id(&headers).as_deref(), Some("abc"));
    }

    #[test]
    fn same_origin_rules() {
        let mut h = HeaderMap::new();
        assert!(same_origin(&h).is_ok(), "no browser headers: a script");
        h.insert(header::HOST, "127.0.0.1:8080".parse().unwrap());
        h.insert(header::ORIGIN, "http://127.0.0.1:8080".parse().unwrap());
        assert!(same_origin(&h).is_ok());
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(same_origin(&h).is_err());
        h.insert("sec-fetch-site", "same-origin".parse().unwrap());
        assert!(
            same_origin(&h).is_ok(),
            "Sec-Fetch-Site decides when present"
        );
        h.insert("sec-fetch-site", "same-site".parse().unwrap());
        assert!(same_origin(&h).is_err());
        assert_eq!(percent_encode("/topics/a b?x=1"), "/topics/a%20b%3Fx%3D1");
    }
}
