//! `produce` / `consume` byte for byte and `topics describe` / `cluster` counts, against the
//! real broker binary: binary-safe produce with --delimiter / --key-delimiter, kcat-style
//! `consume -f` format strings, per-partition offsets in `topics describe`, and internal topics
//! counted the same way by `topics list`, `topics describe` and `cluster` (kafka-topics.sh's
//! rule: listed unless --exclude-internal).
mod client_support;

use std::io::Write;
use std::process::{Command, Stdio};

use client_support::{BrokerProcess, binary};
use serde_json::Value;

fn run(args: &[&str], stdin: &[u8]) -> (bool, Vec<u8>, String) {
    let mut child = Command::new(binary())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run streamforge");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let (success, out, err) = run(args, stdin);
    assert!(success, "streamforge {args:?} failed:\n{err}");
    out
}

fn text(args: &[&str]) -> String {
    String::from_utf8(ok(args, b"")).unwrap()
}

#[test]
fn binary_records_round_trip_with_delimiters_and_format_strings() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), &[]);
    let bs = b.bootstrap();
    let bs = bs.as_str();
    ok(
        &["topics", "create", "bin", "--partitions", "1", "-b", bs],
        b"",
    );
    // Not UTF-8, with newlines inside values: records end at ';;', keys at '::'.
    let input: &[u8] = b"k1::\xff\x00\nv1;;k2::v2\xfe;;novalue-key";
    ok(
        &[
            "produce",
            "bin",
            "-D",
            ";;",
            "--key-delimiter",
            "::",
            "-b",
            bs,
        ],
        input,
    );
    let out = ok(
        &[
            "consume",
            "bin",
            "--from-beginning",
            "-n",
            "3",
            "-f",
            "%t|%p|%o|%K|%S|%k=%v\\n",
            "-b",
            bs,
        ],
        b"",
    );
    let mut expected = Vec::new();
    expected.extend_from_slice(b"bin|0|0|2|5|k1=\xff\x00\nv1\n");
    expected.extend_from_slice(b"bin|0|1|2|3|k2=v2\xfe\n");
    expected.extend_from_slice(b"bin|0|2|-1|11|=novalue-key\n");
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&expected)
    );
    assert_eq!(out, expected, "bytes must come back unchanged");
    // The plain value format writes raw bytes too.
    let raw = ok(
        &["consume", "bin", "--from-beginning", "-n", "1", "-b", bs],
        b"",
    );
    assert_eq!(raw, b"\xff\x00\nv1\n");
    let (bad, _, err) = run(
        &[
            "consume",
            "bin",
            "--from-beginning",
            "-n",
            "1",
            "-f",
            "%q",
            "-b",
            bs,
        ],
        b"",
    );
    assert!(!bad && err.contains("%q"), "{err}");

    // topics describe: per-partition log start offset, high watermark and size.
    let d = text(&["topics", "describe", "bin", "-b", bs]);
    assert!(
        d.contains("LOG-START-OFFSET") && d.contains("HIGH-WATERMARK"),
        "{d}"
    );
    let row = d
        .lines()
        .find(|l| l.trim_start().starts_with("0 "))
        .expect("partition row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    // ... LOG-START-OFFSET HIGH-WATERMARK SIZE: three records take some bytes on disk.
    assert_eq!(&cells[cells.len() - 3..cells.len() - 1], ["0", "3"], "{d}");
    assert!(cells[cells.len() - 1].parse::<u64>().unwrap() > 0, "{d}");
    let j: Value =
        serde_json::from_str(&text(&["topics", "describe", "bin", "--json", "-b", bs])).unwrap();
    assert_eq!(j[0]["partitions"][0]["high_watermark"], 3, "{j}");

    // One rule for internal topics everywhere: counted and listed unless --exclude-internal.
    let listed: Vec<Value> =
        serde_json::from_str(&text(&["topics", "list", "--json", "-b", bs])).unwrap();
    assert!(
        listed.iter().any(|t| t == "__consumer_offsets"),
        "{listed:?}"
    );
    let user: Vec<Value> = serde_json::from_str(&text(&[
        "topics",
        "list",
        "--exclude-internal",
        "--json",
        "-b",
        bs,
    ]))
    .unwrap();
    assert_eq!(user, vec![Value::from("bin")]);
    let all: Vec<Value> =
        serde_json::from_str(&text(&["topics", "describe", "--json", "-b", bs])).unwrap();
    let cluster: Value = serde_json::from_str(&text(&["cluster", "--json", "-b", bs])).unwrap();
    assert_eq!(cluster["topics"], listed.len(), "{cluster}");
    assert_eq!(all.len(), listed.len());
    assert_eq!(cluster["internal_topics"], listed.len() - user.len());
    let partitions: usize = all
        .iter()
        .map(|t| t["partitions"].as_array().unwrap().len())
        .sum();
    assert_eq!(cluster["partitions"], partitions, "{cluster}");
}
