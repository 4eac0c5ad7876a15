//! The dashboard's login against the real `streamforge broker` binary with a SASL listener: the
//! user created with `streamforge users` (the same user SASL PLAIN/SCRAM clients log in as) is
//! the only way into the HTTP API — refused without credentials or with a wrong password,
//! served with Basic auth or a login session, refused again after logout; `/metrics` stays
//! open by default; the start-up log says the dashboard asks for a login.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
/// `alice:alice-secret` in base64.
const ALICE_BASIC: &str = "Basic YWxpY2U6YWxpY2Utc2VjcmV0";
/// `alice:wrong` in base64.
const WRONG_BASIC: &str = "Basic YWxpY2U6d3Jvbmc=";

struct BrokerProcess {
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<(&str, &str)>,
) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect_timeout(&addr, WAIT)?;
    stream.set_read_timeout(Some(WAIT))?;
    let (content_type, body) = body.unwrap_or(("application/json", ""));
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        request.push_str(&format!("{n}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad answer: {text}")))?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok(Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    })
}

fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Answer {
    http(addr, "GET", path, headers, None).unwrap()
}

/// A broker with a PLAINTEXT listener (for `streamforge users`) and a SASL_PLAINTEXT one, and
/// user alice; answers the broker and its dashboard address.
fn start_broker() -> (BrokerProcess, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let (plain, sasl, web) = (free_addr(), free_addr(), free_addr());
    let log = std::fs::File::create(dir.path().join("broker.log")).unwrap();
    let listeners = format!("PLAINTEXT://{plain},SASL_PLAINTEXT://{sasl}");
    let child = Command::new(env!("CARGO_BIN_EXE_streamforge"))
        .args(["broker", "--listeners", &listeners])
        .args(["--sasl-mechanisms", "PLAIN,SCRAM-SHA-256"])
        .args(["--http-listen", &web.to_string(), "--data-dir"])
        .arg(dir.path().join("data"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let broker = BrokerProcess { child, dir };
    let deadline = Instant::now() + WAIT;
    loop {
        let created = Command::new(env!("CARGO_BIN_EXE_streamforge"))
            .args(["users", "-b", &plain.to_string(), "create", "alice"])
            .args(["--password", "alice-secret"])
            .output()
            .unwrap();
        if created.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "users create: {}\n{}",
            String::from_utf8_lossy(&created.stderr),
            broker_log(&broker)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    while !http(web, "GET", "/healthz", &[], None).is_ok_and(|a| a.status == 200) {
        assert!(
            Instant::now() < deadline,
            "no dashboard\n{}",
            broker_log(&broker)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (broker, web)
}

fn broker_log(b: &BrokerProcess) -> String {
    std::fs::read_to_string(b.dir.path().join("broker.log")).unwrap_or_default()
}

#[test]
fn the_http_api_needs_a_broker_user_with_a_sasl_listener() {
    let (broker, web) = start_broker();

    let r = get(web, "/api/topics", &[]);
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("log in"));
    let r = get(web, "/api/topics", &[("Authorization", WRONG_BASIC)]);
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["kafka_error"], "SASL_AUTHENTICATION_FAILED");
    let r = get(web, "/topics", &[]);
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location").as_deref(), Some("/login?next=/topics"));

    let basic = [("Authorization", ALICE_BASIC)];
    let create = r#"{"name":"secured","partitions":2}"#;
    let r = http(
        web,
        "POST",
        "/api/topics",
        &basic,
        Some(("application/json", create)),
    )
    .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    let topics = get(web, "/api/topics", &basic).json();
    assert!(
        topics
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "secured"),
        "{topics}"
    );
    assert_eq!(
        get(web, "/api/whoami", &basic).json()["principal"],
        "User:alice"
    );

    // The page's way in: the login form, a session cookie, logout.
    let form = "username=alice&password=alice-secret&next=%2Ftopics";
    let r = http(
        web,
        "POST",
        "/login",
        &[],
        Some(("application/x-www-form-urlencoded", form)),
    )
    .unwrap();
    assert_eq!(r.status, 303, "{}", r.body);
    let set_cookie = r.header("set-cookie").expect("session cookie");
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"));
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let session = [("Cookie", cookie.as_str())];
    assert_eq!(get(web, "/api/cluster", &session).status, 200);
    assert_eq!(get(web, "/topics/secured", &session).status, 200);
    assert_eq!(
        http(web, "POST", "/logout", &session, None).unwrap().status,
        303
    );
    assert_eq!(get(web, "/api/cluster", &session).status, 401);

    // Prometheus scrapes without a login unless --http-metrics-auth required.
    let r = get(web, "/metrics", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body.contains("streamforge_"), "{}", r.body);
    let log = broker_log(&broker);
    assert!(log.contains("the dashboard asks for a login"), "{log}");
}

#[test]
fn metrics_auth_required_takes_basic_auth() {
    let dir = tempfile::tempdir().unwrap();
    let (kafka, web) = (free_addr(), free_addr());
    let child = Command::new(env!("CARGO_BIN_EXE_streamforge"))
        .args(["broker", "--listen", &kafka.to_string()])
        .args(["--http-listen", &web.to_string(), "--http-auth", "required"])
        .args(["--http-metrics-auth", "required", "--data-dir"])
        .arg(dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _broker = BrokerProcess { child, dir };
    let deadline = Instant::now() + WAIT;
    while !http(web, "GET", "/healthz", &[], None).is_ok_and(|a| a.status == 200) {
        assert!(Instant::now() < deadline, "no dashboard");
        std::thread::sleep(Duration::from_millis(100));
    }
    // No SASL listener, but --http-auth required: a login anyway.
    assert_eq!(get(web, "/api/topics", &[]).status, 401);
    assert_eq!(get(web, "/metrics", &[]).status, 401);
    loop {
        let created = Command::new(env!("CARGO_BIN_EXE_streamforge"))
            .args(["users", "-b", &kafka.to_string(), "create", "alice"])
            .args(["--password", "alice-secret"])
            .output()
            .unwrap();
        if created.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "users create failed");
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = get(web, "/metrics", &[("Authorization", ALICE_BASIC)]);
    assert_eq!(r.status, 200);
    assert!(r.body.contains("streamforge_"));
}
