//! `streamforge groups` as kafka-consumer-groups.sh behaves, against the real broker binary:
//! reset-offsets is a dry run unless --execute, takes `--topic T:P,P` / `--all-topics` and every
//! Kafka target, and refuses an active group with Kafka's message; describe's three views.
mod client_support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use client_support::{BrokerProcess, binary};
use serde_json::Value;

/// Longest wait for a background consumer to join its group.
const JOIN_TIMEOUT: Duration = Duration::from_secs(30);

fn sf(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new(binary())
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run streamforge");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(args: &[&str]) -> String {
    let (success, out, err) = sf(args, None);
    assert!(success, "streamforge {args:?} failed:\n{out}\n{err}");
    out
}

/// Committed offset per partition of `topic`, from `groups describe --json`.
fn committed(bs: &str, group: &str) -> Vec<Option<i64>> {
    let v: Value =
        serde_json::from_str(&ok(&["groups", "describe", group, "--json", "-b", bs])).unwrap();
    v["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["committed_offset"].as_i64())
        .collect()
}

/// Rows of a table (header skipped), split on runs of spaces.
fn rows(out: &str, header_starts: &str) -> Vec<Vec<String>> {
    let mut lines = out.lines().skip_while(|l| !l.starts_with(header_starts));
    lines.next().expect("table header");
    lines
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("Total lag"))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn reset_offsets_dry_run_execute_scopes_targets_and_active_group() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), &[]);
    let bs = b.bootstrap();
    let bs = bs.as_str();
    ok(&["topics", "create", "g3", "--partitions", "3", "-b", bs]);
    let input: String = (0..100).map(|i| format!("r{i}\n")).collect();
    for p in ["0", "1", "2"] {
        let (success, _, err) = sf(&["produce", "g3", "-p", p, "-b", bs], Some(&input));
        assert!(success, "{err}");
    }
    // The group consumes everything and commits: every partition at its end.
    let out = ok(&[
        "consume",
        "g3",
        "--group",
        "gr",
        "--from",
        "beginning",
        "-n",
        "300",
        "-b",
        bs,
    ]);
    assert_eq!(out.lines().count(), 300);
    let ends = committed(bs, "gr");
    assert_eq!(ends, vec![Some(100); 3]);

    // Without --execute: a dry run that prints the plan and commits nothing.
    let (success, out, err) = sf(
        &[
            "groups",
            "reset-offsets",
            "--group",
            "gr",
            "--topic",
            "g3",
            "--to-earliest",
            "-b",
            bs,
        ],
        None,
    );
    assert!(success, "{err}");
    assert!(err.contains("--execute"), "{err}");
    let plan = rows(&out, "GROUP");
    assert_eq!(plan.len(), 3, "{out}");
    assert!(
        plan.iter()
            .all(|r| r[0] == "gr" && r[1] == "g3" && r[3] == "0"),
        "{out}"
    );
    assert_eq!(committed(bs, "gr"), ends, "a dry run must not commit");

    // --topic T:0,2 --execute: only those partitions move.
    ok(&[
        "groups",
        "reset-offsets",
        "gr",
        "--topic",
        "g3:0,2",
        "--to-earliest",
        "--execute",
        "-b",
        bs,
    ]);
    let now = committed(bs, "gr");
    assert_eq!(
        (now[0], now[1], now[2]),
        (Some(0), ends[1], Some(0)),
        "{now:?}"
    );

    // --shift-by, --to-offset (clamped), --to-datetime / --by-duration, --all-topics.
    ok(&[
        "groups",
        "reset-offsets",
        "gr",
        "--all-topics",
        "--shift-by",
        "5",
        "--execute",
        "-b",
        bs,
    ]);
    let shifted = committed(bs, "gr");
    assert_eq!(
        shifted,
        vec![Some(5), Some(100), Some(5)],
        "past the end is clamped"
    );
    ok(&[
        "groups",
        "reset-offsets",
        "gr",
        "--all-topics",
        "--to-datetime",
        "2999-01-01T00:00:00.000Z",
        "--execute",
        "-b",
        bs,
    ]);
    assert_eq!(
        committed(bs, "gr"),
        ends,
        "a time after every record is the end"
    );
    ok(&[
        "groups",
        "reset-offsets",
        "gr",
        "--all-topics",
        "--by-duration",
        "PT1H",
        "--execute",
        "-b",
        bs,
    ]);
    assert_eq!(
        committed(bs, "gr"),
        vec![Some(0); 3],
        "every record is newer than an hour"
    );
    ok(&[
        "groups",
        "reset-offsets",
        "gr",
        "--topic",
        "g3:1",
        "--to-offset",
        "100000",
        "--execute",
        "-b",
        bs,
    ]);
    assert_eq!(committed(bs, "gr")[1], ends[1]);

    // An active member: refused with Kafka's message, for the dry run too.
    let consumer = Background(
        Command::new(binary())
            .args(["consume", "g3", "--group", "gr", "-b", bs])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + JOIN_TIMEOUT;
    loop {
        let state = ok(&["groups", "describe", "gr", "--state", "-b", bs]);
        if state.contains("Stable") {
            let r = rows(&state, "GROUP");
            assert_eq!(r[0][0], "gr", "{state}");
            assert!(state.contains(&format!("{bs} (1)")), "{state}");
            assert_eq!(r[0].last().unwrap(), "1", "{state}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer never joined:\n{state}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let members = ok(&["groups", "describe", "gr", "--members", "-b", bs]);
    let m = rows(&members, "GROUP");
    assert_eq!(m.len(), 1, "{members}");
    assert_eq!(
        m[0].last().unwrap(),
        "3",
        "one member owns all 3 partitions:\n{members}"
    );
    let (success, _, err) = sf(
        &[
            "groups",
            "reset-offsets",
            "gr",
            "--all-topics",
            "--to-latest",
            "-b",
            bs,
        ],
        None,
    );
    assert!(!success);
    assert!(
        err.contains(
            "Assignments can only be reset if the group 'gr' is inactive, but the current state is Stable."
        ),
        "{err}"
    );
    drop(consumer);

    let all: Value = serde_json::from_str(&ok(&[
        "groups",
        "describe",
        "--all-groups",
        "--json",
        "-b",
        bs,
    ]))
    .unwrap();
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .any(|g| g["group"]["group_id"] == "gr"),
        "{all}"
    );
    let offsets = ok(&["groups", "describe", "gr", "-b", bs]);
    assert!(
        offsets.contains("CURRENT-OFFSET") && offsets.contains("CLIENT-ID"),
        "{offsets}"
    );
}
