//! The login page, login, logout and `GET /api/whoami`.

use axum::Json;
use axum::extract::{Extension, Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::gate::{Caller, session_id};
use super::{Principal, SESSION_COOKIE};
use crate::routes::AppState;

const LOGIN_HTML: &str = include_str!("../../ui/login.html");
/// Longest password a login form may carry (a bound on what is hashed).
const PASSWORD_BYTES_MAX: usize = 1024;

#[derive(Debug, Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

#[derive(Deserialize)]
pub struct LoginForm {
    username: String,
    password: String,
    next: Option<String>,
}

/// `GET /login`: the form (without a login configured: the overview).
pub async fn login_form(State(state): State<AppState>, Query(q): Query<NextQuery>) -> Response {
    if state.auth.login.is_none() {
        return redirect("/", None);
    }
    login_page(StatusCode::OK, &safe_next(q.next.as_deref()), "", "")
}

/// `POST /login` (form fields `username`, `password`, `next`): a session cookie and a redirect
/// to `next`, or the form again with the error.
pub async fn login_submit(State(state): State<AppState>, Form(form): Form<LoginForm>) -> Response {
    let next = safe_next(form.next.as_deref());
    let Some(login) = &state.auth.login else {
        return redirect("/", None);
    };
    let user = form.username.trim().to_string();
    let ok = form.password.len() <= PASSWORD_BYTES_MAX
        && login.check_password(user.clone(), form.password).await;
    if !ok {
        tracing::info!(%user, "dashboard login failed");
        return login_page(
            StatusCode::UNAUTHORIZED,
            &next,
            &user,
            "Invalid username or password.",
        );
    }
    let id = login.sessions.create(Principal::user(&user));
    tracing::info!(principal = %Principal::user(&user), "dashboard login");
    let cookie = format!("{SESSION_COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict");
    redirect(&next, Some(cookie))
}

/// `POST /logout`: ends the session, clears the cookie, back to the login page.
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let (Some(login), Some(id)) = (&state.auth.login, session_id(&headers)) {
        login.sessions.remove(&id);
    }
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    redirect("/login", Some(cookie))
}

/// `GET /api/whoami`: the caller's principal and whether the dashboard asks for a login.
pub async fn whoami(Extension(caller): Extension<Caller>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "principal": caller.principal.to_string(),
        "user": caller.principal.name,
        "login_required": caller.login_required(),
    }))
}

fn redirect(location: &str, cookie: Option<String>) -> Response {
    let mut response = (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, location.to_string())],
    )
        .into_response();
    if let Some(cookie) = cookie.and_then(|c| c.parse().ok()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// Only a path on this server (`/...`, not `//host`), else the overview: no open redirect.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_string(),
        _ => "/".to_string(),
    }
}

/// The form; after a failed login with the user name filled in again.
fn login_page(status: StatusCode, next: &str, user: &str, error: &str) -> Response {
    let html = LOGIN_HTML
        .replace("{{next}}", &escape(next))
        .replace("{{user}}", &escape(user))
        .replace("{{error}}", &escape(error))
        .replace(
            "{{error_class}}",
            if error.is_empty() { "hidden" } else { "" },
        );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_server() {
        assert_eq!(safe_next(Some("/topics/a")), "/topics/a");
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        assert_eq!(safe_next(None), "/");
        assert_eq!(escape("\"><script>"), "&quot;&gt;&lt;script&gt;");
    }
}
