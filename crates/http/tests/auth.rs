//! The dashboard's login over real HTTP against the in-memory view: 401 JSON for the API and
//! a redirect for pages, the session cookie (HttpOnly, SameSite=Strict, random id), logout,
//! expiry, the bounded session table, Basic auth for scripts, the CSRF check, `/metrics`
//! behind auth when asked, and the authorization hook's 403 with Kafka's error names.
//! (Through the real binary: crates/cli/tests/dashboard_auth.rs and
//! tests/browser/test/auth.test.mjs.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use parking_lot::Mutex;
use streamforge_http::auth::{Action, HttpAuth, Operation, Principal, Resource};
use streamforge_http::*;
use support::MemView;
use support::client::{Answer, send};

mod support;

const FORM: &str = "application/x-www-form-urlencoded";

fn verify(user: &str, password: &str) -> bool {
    matches!(
        (user, password),
        ("alice", "alice-secret") | ("bob", "bob-secret")
    )
}

fn auth() -> HttpAuth {
    HttpAuth::new(Arc::new(verify))
}

async fn serve_with(auth: Option<HttpAuth>, authorizer: Option<auth::AuthorizeFn>) -> HttpServer {
    let options = HttpOptions {
        auth,
        authorizer,
        ..Default::default()
    };
    serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(MemView::default()),
        options,
    )
    .await
    .unwrap()
}

fn basic(user: &str, password: &str) -> String {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {token}")
}

/// Logs in through the form; answers the `Cookie` header value.
async fn login(a: SocketAddr, user: &str, password: &str) -> String {
    let body = format!("username={user}&password={password}&next=%2Ftopics");
    let r = send(a, "POST", "/login", &[], Some((FORM, &body))).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.header("location"), Some("/topics"));
    let cookie = r
        .header("set-cookie")
        .expect("a session cookie")
        .to_string();
    cookie.split(';').next().unwrap().to_string()
}

async fn get(a: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Answer {
    send(a, "GET", path, headers, None).await
}

#[tokio::test]
async fn without_credentials_the_api_answers_401_and_pages_go_to_the_login() {
    let server = serve_with(Some(auth()), None).await;
    let a = server.local_addr();
    let r = get(a, "/api/topics", &[]).await;
    assert_eq!(r.status, 401);
    assert!(r.json()["error"].as_str().unwrap().contains("log in"));
    assert!(r.header("www-authenticate").unwrap().starts_with("Basic"));
    // A browser's fetch gets no Basic challenge (no password pop-up), the UI goes to /login.
    let r = get(a, "/api/cluster", &[("Sec-Fetch-Mode", "cors")]).await;
    assert_eq!((r.status, r.header("www-authenticate")), (401, None));
    let r = send(
        a,
        "POST",
        "/api/topics",
        &[],
        Some(("application/json", "{}")),
    )
    .await;
    assert_eq!(r.status, 401);

    let r = get(a, "/topics/orders?x=1", &[]).await;
    assert_eq!(r.status, 303);
    assert_eq!(
        r.header("location"),
        Some("/login?next=/topics/orders%3Fx%3D1")
    );
    let r = get(a, "/login?next=/topics/orders", &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains(r#"name="password""#));
    assert!(r.body.contains(r#"value="/topics/orders""#));
    for open in ["/healthz", "/static/style.css", "/metrics"] {
        assert_eq!(get(a, open, &[]).await.status, 200, "{open} stays open");
    }
}

#[tokio::test]
async fn login_sets_a_strict_session_cookie_and_logout_ends_it() {
    let server = serve_with(Some(auth()), None).await;
    let a = server.local_addr();
    let wrong = "username=alice&password=nope&next=%2F";
    let r = send(a, "POST", "/login", &[], Some((FORM, wrong))).await;
    assert_eq!(r.status, 401);
    assert!(r.body.contains("Invalid username or password"));
    assert!(
        r.body.contains(r#"value="alice""#),
        "the user name stays filled in"
    );
    assert_eq!(r.header("set-cookie"), None);

    let body = "username=alice&password=alice-secret&next=%2Ftopics";
    let r = send(a, "POST", "/login", &[], Some((FORM, body))).await;
    let set_cookie = r.header("set-cookie").unwrap();
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    let id = set_cookie
        .strip_prefix("sf_session=")
        .unwrap()
        .split(';')
        .next()
        .unwrap();
    assert_eq!(id.len(), 64, "32 random bytes in hex");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));

    let cookie = login(a, "alice", "alice-secret").await;
    let headers = [("Cookie", cookie.as_str())];
    assert_eq!(get(a, "/api/topics", &headers).await.status, 200);
    assert_eq!(get(a, "/topics", &headers).await.status, 200);
    let me = get(a, "/api/whoami", &headers).await.json();
    assert_eq!(me["principal"], "User:alice");
    assert_eq!(me["login_required"], true);

    let r = send(a, "POST", "/logout", &headers, None).await;
    assert_eq!((r.status, r.header("location")), (303, Some("/login")));
    assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(get(a, "/api/topics", &headers).await.status, 401);
    assert_eq!(get(a, "/", &headers).await.status, 303);
}

#[tokio::test]
async fn scripts_use_basic_auth() {
    let server = serve_with(Some(auth()), None).await;
    let a = server.local_addr();
    let good = basic("alice", "alice-secret");
    let r = send(
        a,
        "POST",
        "/api/topics",
        &[("Authorization", &good)],
        Some(("application/json", r#"{"name":"orders","partitions":1}"#)),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = get(a, "/api/topics", &[("Authorization", &good)]).await;
    assert_eq!(r.json()[0]["name"], "orders");
    let r = get(a, "/api/topics", &[("Authorization", &basic("alice", "x"))]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["kafka_error"], "SASL_AUTHENTICATION_FAILED");
    let r = get(a, "/api/topics", &[("Authorization", "Basic !!!")]).await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn cross_site_state_changes_are_refused() {
    let server = serve_with(Some(auth()), None).await;
    let a = server.local_addr();
    let cookie = login(a, "alice", "alice-secret").await;
    let create = |name: &str| format!(r#"{{"name":"{name}","partitions":1}}"#);
    let own_origin = format!("http://{a}");
    let cases: [(&[(&str, &str)], u16); 5] = [
        (&[("Origin", "http://evil.example")], 403),
        (&[("Sec-Fetch-Site", "cross-site")], 403),
        (&[("Sec-Fetch-Site", "same-site")], 403),
        (&[("Sec-Fetch-Site", "same-origin")], 201),
        (&[("Origin", own_origin.as_str())], 201),
    ];
    for (i, (extra, want)) in cases.iter().enumerate() {
        let mut headers = vec![("Cookie", cookie.as_str())];
        headers.extend_from_slice(extra);
        let body = create(&format!("t{i}"));
        let r = send(
            a,
            "POST",
            "/api/topics",
            &headers,
            Some(("application/json", &body)),
        )
        .await;
        assert_eq!(r.status, *want, "{extra:?}: {}", r.body);
        if *want == 403 {
            assert!(r.json()["error"].as_str().unwrap().contains("cross-site"));
        }
    }
    // Login CSRF: a cross-site form cannot log the browser in as someone else.
    let body = "username=alice&password=alice-secret";
    let r = send(
        a,
        "POST",
        "/login",
        &[("Origin", "http://evil.example")],
        Some((FORM, body)),
    )
    .await;
    assert_eq!((r.status, r.header("set-cookie")), (403, None));
}

#[tokio::test]
async fn sessions_expire_when_unused() {
    let server = serve_with(
        Some(HttpAuth {
            session_timeout_ms: 400,
            ..auth()
        }),
        None,
    )
    .await;
    let a = server.local_addr();
    let cookie = login(a, "alice", "alice-secret").await;
    let headers = [("Cookie", cookie.as_str())];
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            get(a, "/api/cluster", &headers).await.status,
            200,
            "use extends it"
        );
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(get(a, "/api/cluster", &headers).await.status, 401);
    assert_eq!(get(a, "/", &headers).await.status, 303);
}

#[tokio::test]
async fn the_session_table_is_bounded() {
    let server = serve_with(
        Some(HttpAuth {
            sessions_max: 2,
            ..auth()
        }),
        None,
    )
    .await;
    let a = server.local_addr();
    let first = login(a, "alice", "alice-secret").await;
    let second = login(a, "bob", "bob-secret").await;
    let third = login(a, "alice", "alice-secret").await;
    let status = |c: String| async move { get(a, "/api/cluster", &[("Cookie", &c)]).await.status };
    assert_eq!(
        status(first).await,
        401,
        "the least recently used session ended"
    );
    assert_eq!(status(second).await, 200);
    assert_eq!(status(third).await, 200);
}

#[tokio::test]
async fn metrics_take_basic_auth_when_required() {
    let server = serve_with(
        Some(HttpAuth {
            metrics_auth_required: true,
            ..auth()
        }),
        None,
    )
    .await;
    let a = server.local_addr();
    assert_eq!(get(a, "/metrics", &[]).await.status, 401);
    let r = get(
        a,
        "/metrics",
        &[("Authorization", &basic("bob", "bob-secret"))],
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains("# TYPE") || r.body.contains("# HELP"),
        "{}",
        r.body
    );
}

/// bob may not delete topics, see `secret`, touch group `g1` or start benchmarks; every question
/// the hook gets is recorded.
#[tokio::test]
async fn denied_actions_get_403_with_kafkas_error_name() {
    let asked: Arc<Mutex<Vec<(Principal, Action)>>> = Arc::default();
    let log = Arc::clone(&asked);
    let hook: auth::AuthorizeFn = Arc::new(move |p: &Principal, action: &Action| {
        log.lock().push((p.clone(), action.clone()));
        if p.name != "bob" {
            return true;
        }
        !matches!(
            (action.operation, &action.resource),
            (Operation::Delete, Resource::Topic(_))
                | (_, Resource::Group(_))
                | (Operation::Create, Resource::Cluster)
        ) && action.resource != Resource::Topic("secret".into())
    });
    let server = serve_with(Some(auth()), Some(hook)).await;
    let a = server.local_addr();
    let alice = basic("alice", "alice-secret");
    for name in ["orders", "secret", "t"] {
        let body = format!(r#"{{"name":"{name}","partitions":1}}"#);
        let r = send(
            a,
            "POST",
            "/api/topics",
            &[("Authorization", &alice)],
            Some(("application/json", &body)),
        )
        .await;
        assert_eq!(r.status, 201);
    }
    let bob = basic("bob", "bob-secret");
    let bob_h = [("Authorization", bob.as_str())];
    let r = send(
        a,
        "DELETE",
        "/api/topics/orders?confirm=orders",
        &bob_h,
        None,
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    let v = r.json();
    assert_eq!(
        (v["kafka_error"].as_str(), v["kafka_code"].as_i64()),
        (Some("TOPIC_AUTHORIZATION_FAILED"), Some(29))
    );
    assert!(v["error"].as_str().unwrap().contains("User:bob"));
    let (who, action) = asked.lock().last().cloned().unwrap();
    assert_eq!(who, Principal::user("bob"));
    assert_eq!(
        action,
        Action::new(Operation::Delete, Resource::Topic("orders".into()))
    );

    // Lists hold only what bob may Describe.
    let topics = get(a, "/api/topics", &bob_h).await.json();
    let names: Vec<&str> = topics
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["orders", "t"]);
    // A topic's consumers: only the groups bob may Describe.
    let path = "/api/topics/t/consumers";
    assert_eq!(get(a, path, &bob_h).await.json(), serde_json::json!([]));
    let all = get(a, path, &[("Authorization", &alice)]).await.json();
    assert_eq!(all[0]["group_id"], "g1");
    assert_eq!(
        get(a, "/api/groups", &bob_h)
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        get(a, "/api/groups", &[("Authorization", &alice)])
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let r = get(
        a,
        "/api/topics/secret/partitions/0/messages?offset=0",
        &bob_h,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["kafka_error"].as_str()),
        (403, Some("TOPIC_AUTHORIZATION_FAILED"))
    );
    let r = send(a, "DELETE", "/api/groups/g1?confirm=g1", &bob_h, None).await;
    assert_eq!((r.status, r.json()["kafka_code"].as_i64()), (403, Some(30)));
    let r = send(
        a,
        "POST",
        "/api/bench",
        &bob_h,
        Some(("application/json", "{}")),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["kafka_error"].as_str()),
        (403, Some("CLUSTER_AUTHORIZATION_FAILED"))
    );
    let r = send(
        a,
        "POST",
        "/api/topics/orders/messages",
        &bob_h,
        Some(("application/json", r#"{"value":"v"}"#)),
    )
    .await;
    assert_eq!(
        r.status, 501,
        "allowed, so the view answers (MemView has no produce): {}",
        r.body
    );
    assert_eq!(
        asked.lock().last().unwrap().1,
        Action::new(Operation::Write, Resource::Topic("orders".into()))
    );
}

#[tokio::test]
async fn without_a_login_requests_are_anonymous_and_still_asked() {
    let hook: auth::AuthorizeFn = Arc::new(|p: &Principal, a: &Action| {
        p.name == "ANONYMOUS" && a.operation != Operation::Delete
    });
    let server = serve_with(None, Some(hook)).await;
    let a = server.local_addr();
    let me = get(a, "/api/whoami", &[]).await.json();
    assert_eq!(
        (me["principal"].as_str(), me["login_required"].as_bool()),
        (Some("User:ANONYMOUS"), Some(false))
    );
    let r = get(a, "/login", &[]).await;
    assert_eq!((r.status, r.header("location")), (303, Some("/")));
    let r = send(a, "DELETE", "/api/topics/x?confirm=x", &[], None).await;
    assert_eq!(r.status, 403);
    assert_eq!(get(a, "/api/topics", &[]).await.status, 200);
}
