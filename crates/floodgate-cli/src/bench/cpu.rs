//! CPU time of a process, from `/proc/<pid>/stat` (user + system), and its
//! resident memory, from `/proc/<pid>/status`.

use std::time::Duration;

/// The CPU time `pid` has used so far, if it can be read.
pub(super) fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line (11 and 12 here).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // CLK_TCK is 100 on Linux for every architecture this runs on.
    Some(Duration::from_secs_f64((utime + stime) as f64 / 100.0))
}

/// The resident memory of `pid` in bytes (`VmRSS`), if it can be read.
pub(super) fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
