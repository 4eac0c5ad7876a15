//! CPU time of this process (all threads: the benchmark client and, when embedded, the broker),
//! so a phase's figures can be read independently of what else the machine is running.
use std::path::Path;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, fixed at 100 on Linux).
const USER_HZ: f64 = 100.0;

/// CPU seconds used so far by the live threads of this process, from the per-thread
/// scheduler statistics (nanoseconds on CPU); `None` where /proc is unavailable.
pub fn process_cpu_seconds() -> Option<f64> {
    from_schedstat(Path::new("/proc/self/task")).or_else(from_stat)
}

fn from_schedstat(tasks: &Path) -> Option<f64> {
    let mut ns: u64 = 0;
    for entry in std::fs::read_dir(tasks).ok()? {
        let path = entry.ok()?.path().join("schedstat");
        let text = std::fs::read_to_string(path).ok()?;
        ns += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(ns as f64 / 1e9)
}

/// utime + stime of the whole process (10 ms resolution).
fn from_stat() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let Some(before) = process_cpu_seconds() else {
            return; // no /proc here
        };
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = process_cpu_seconds().unwrap();
        assert!(after > before, "{before} -> {after}");
        assert!(from_stat().is_some());
    }
}
