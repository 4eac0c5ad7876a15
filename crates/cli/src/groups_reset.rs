//! `streamforge groups reset-offsets`, as `kafka-consumer-groups.sh --reset-offsets`: a dry run
//! unless `--execute`, `--all-topics` or `--topic T[:P,P]`, one target, and only while the group
//! has no active members.
use std::collections::BTreeSet;

use anyhow::Context;
use chrono::{DateTime, Local, NaiveDateTime, TimeZone};
use serde_json::json;
use streamforge_client::{Admin, ResetTarget};

use crate::client_common::{print_json, print_table};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true)))]
#[command(group(clap::ArgGroup::new("scope").required(true)))]
pub struct ResetArgs {
    /// The group whose committed offsets move (or `--group G`, Kafka's spelling).
    #[arg(required_unless_present = "group_flag")]
    group: Option<String>,
    /// The group whose committed offsets move.
    #[arg(long = "group", value_name = "GROUP", conflicts_with = "group")]
    group_flag: Option<String>,
    /// A topic to reset, `TOPIC` (every partition) or `TOPIC:0,2` (those partitions); repeatable.
    #[arg(long, group = "scope")]
    topic: Vec<String>,
    /// Every topic the group has committed offsets on.
    #[arg(long, group = "scope")]
    all_topics: bool,
    /// Reset to each partition's earliest offset.
    #[arg(long, group = "target")]
    to_earliest: bool,
    /// Reset to each partition's latest offset (the high watermark).
    #[arg(long, group = "target")]
    to_latest: bool,
    /// Keep the committed offsets (clamped into each partition's range).
    #[arg(long, group = "target")]
    to_current: bool,
    /// Reset to this offset (clamped into each partition's range).
    #[arg(long, group = "target", value_name = "OFFSET")]
    to_offset: Option<i64>,
    /// Reset to the first offset at or after this time: 'YYYY-MM-DDTHH:mm:SS.sss', with an
    /// optional zone ('Z', '+01:00'); local time without one, as Kafka.
    #[arg(long, group = "target", value_name = "DATETIME")]
    to_datetime: Option<String>,
    /// Reset to the first offset whose timestamp (ms since the epoch) is at or after this.
    #[arg(long, group = "target", value_name = "MS")]
    to_timestamp: Option<i64>,
    /// Move the committed offsets by N records (negative goes back).
    #[arg(long, group = "target", allow_hyphen_values = true, value_name = "N")]
    shift_by: Option<i64>,
    /// Reset to the first offset at or after now minus this ISO-8601 duration ('PT1H', 'P1DT12H').
    #[arg(long, group = "target", value_name = "DURATION")]
    by_duration: Option<String>,
    /// Only print the new offsets (the default).
    #[arg(long, conflicts_with = "execute")]
    dry_run: bool,
    /// Commit the new offsets.
    #[arg(long)]
    execute: bool,
}

/// Kafka's states in which a group has no members that would overwrite the reset.
const INACTIVE_STATES: [&str; 2] = ["Empty", "Dead"];

pub async fn run(admin: &Admin, args: ResetArgs, json_out: bool) -> anyhow::Result<()> {
    let group = args
        .group
        .clone()
        .or(args.group_flag.clone())
        .context("name the group")?;
    let desc = admin.describe_group(&group).await?;
    anyhow::ensure!(
        INACTIVE_STATES.contains(&desc.state.as_str()),
        "Assignments can only be reset if the group '{group}' is inactive, but the current state is {}.",
        desc.state
    );
    let target = target(&args)?;
    let tps = partitions(admin, &group, &args).await?;
    let plan = admin.plan_reset(&group, &tps, target).await?;
    if args.execute {
        admin.commit_offsets(&group, &plan).await?;
    } else {
        eprintln!(
            "No action is performed as the --execute option is missing (a dry run): these are the offsets it would commit."
        );
    }
    if json_out {
        let offsets: Vec<_> = plan
            .iter()
            .map(|((t, p), o)| json!({"topic": t, "partition": p, "new_offset": o}))
            .collect();
        print_json(&json!({"group": group, "executed": args.execute, "offsets": offsets}));
    } else {
        let rows: Vec<Vec<String>> = plan
            .iter()
            .map(|((t, p), o)| vec![group.clone(), t.clone(), p.to_string(), o.to_string()])
            .collect();
        print_table(&["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], &rows);
    }
    Ok(())
}

fn target(a: &ResetArgs) -> anyhow::Result<ResetTarget> {
    let now_ms = chrono::Utc::now().timestamp_millis();
    Ok(if a.to_earliest {
        ResetTarget::Earliest
    } else if a.to_latest {
        ResetTarget::Latest
    } else if a.to_current {
        ResetTarget::ShiftBy(0)
    } else if let Some(o) = a.to_offset {
        ResetTarget::Offset(o)
    } else if let Some(d) = &a.to_datetime {
        ResetTarget::Timestamp(parse_datetime_ms(d)?)
    } else if let Some(t) = a.to_timestamp {
        ResetTarget::Timestamp(t)
    } else if let Some(n) = a.shift_by {
        ResetTarget::ShiftBy(n)
    } else if let Some(d) = &a.by_duration {
        ResetTarget::Timestamp(now_ms - parse_duration_ms(d)?)
    } else {
        anyhow::bail!("choose a target: --to-earliest, --to-latest, --to-offset, ...")
    })
}

/// The partitions `--topic` / `--all-topics` name.
async fn partitions(
    admin: &Admin,
    group: &str,
    args: &ResetArgs,
) -> anyhow::Result<Vec<(String, i32)>> {
    if args.all_topics {
        let committed: BTreeSet<(String, i32)> =
            admin.committed_offsets(group).await?.into_keys().collect();
        return Ok(committed.into_iter().collect());
    }
    let mut out = BTreeSet::new();
    for spec in &args.topic {
        let (topic, parts) = match spec.split_once(':') {
            Some((t, ps)) => (t, Some(ps)),
            None => (spec.as_str(), None),
        };
        let info = admin.cluster().topic(topic, false).await?;
        let all: BTreeSet<i32> = info.partitions.iter().map(|p| p.partition).collect();
        let chosen: BTreeSet<i32> = match parts {
            None => all.clone(),
            Some(ps) => ps
                .split(',')
                .map(|p| {
                    p.trim()
                        .parse::<i32>()
                        .with_context(|| format!("--topic {spec}: bad partition '{p}'"))
                })
                .collect::<anyhow::Result<_>>()?,
        };
        if let Some(p) = chosen.difference(&all).next() {
            anyhow::bail!("topic {topic} has no partition {p}");
        }
        out.extend(chosen.into_iter().map(|p| (topic.to_string(), p)));
    }
    Ok(out.into_iter().collect())
}

/// Kafka's `--to-datetime` format, with or without milliseconds and zone.
fn parse_datetime_ms(s: &str) -> anyhow::Result<i64> {
    let s = s.trim().trim_matches('"');
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        return Ok(dt.timestamp_millis());
    }
    for f in ["%Y-%m-%dT%H:%M:%S%.3f%:z", "%Y-%m-%dT%H:%M:%S%.3f%z"] {
        if let Ok(dt) = DateTime::parse_from_str(s, f) {
            return Ok(dt.timestamp_millis());
        }
    }
    for f in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S"] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(s, f) {
            let local = Local
                .from_local_datetime(&naive)
                .earliest()
                .with_context(|| format!("{s} does not exist in the local time zone"))?;
            return Ok(local.timestamp_millis());
        }
    }
    anyhow::bail!("--to-datetime {s}: want YYYY-MM-DDTHH:mm:SS.sss (optionally with Z or +hh:mm)")
}

/// An ISO-8601 duration as Java's `Duration.parse` reads it: `PnDTnHnMn.nS`.
fn parse_duration_ms(s: &str) -> anyhow::Result<i64> {
    let bad = || {
        anyhow::anyhow!("--by-duration {s}: want an ISO-8601 duration such as PT1H30M or P1DT12H")
    };
    let rest = s.trim().to_ascii_uppercase();
    let rest = rest.strip_prefix('P').ok_or_else(bad)?;
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => (d.to_string(), t.to_string()),
        None => (rest.to_string(), String::new()),
    };
    let mut ms = 0f64;
    let mut take = |part: &str, units: &[(char, f64)]| -> anyhow::Result<()> {
        let mut num = String::new();
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                num.push(c);
                continue;
            }
            let unit = units.iter().find(|(u, _)| *u == c).ok_or_else(bad)?;
            ms += num.parse::<f64>().map_err(|_| bad())? * unit.1;
            num.clear();
        }
        if num.is_empty() { Ok(()) } else { Err(bad()) }
    };
    take(&date, &[('D', 86_400_000.0)])?;
    take(
        &time,
        &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1_000.0)],
    )?;
    if date.is_empty() && time.is_empty() {
        return Err(bad());
    }
    Ok(ms as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_java_reads_them() {
        assert_eq!(parse_duration_ms("PT1H").unwrap(), 3_600_000);
        assert_eq!(parse_duration_ms("P1DT12H").unwrap(), 129_600_000);
        assert_eq!(parse_duration_ms("PT0.5S").unwrap(), 500);
        assert_eq!(parse_duration_ms("pt10m").unwrap(), 600_000);
        assert!(parse_duration_ms("1H").is_err());
        assert!(parse_duration_ms("P").is_err());
        assert!(parse_duration_ms("PT5X").is_err());
    }

    #[test]
    fn datetimes_with_a_zone_are_exact() {
        assert_eq!(parse_datetime_ms("1970-01-01T00:00:01.000Z").unwrap(), 1000);
        assert_eq!(
            parse_datetime_ms("1970-01-01T01:00:00.000+01:00").unwrap(),
            0
        );
        assert!(parse_datetime_ms("1970-01-01T00:00:00.000").is_ok());
        assert!(parse_datetime_ms("yesterday").is_err());
    }
}
