//! The host side of the benchmark: CPU and run-queue time of a process,
//! and pinning processes to cores.

use std::process::Command;

use super::smoke;

/// CPU time of process `pid` (user + system) in ms, and the time its
/// threads were runnable but waited for a CPU in ms (Linux; zeros
/// elsewhere).
pub(crate) fn cpu_and_wait(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<f64> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // utime and stime, in clock ticks of 10 ms (USER_HZ 100).
    let cpu = (fields.get(11).unwrap_or(&0.0) + fields.get(12).unwrap_or(&0.0)) * 10.0;
    let mut waited = 0.0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                let ns: f64 = s
                    .split_whitespace()
                    .nth(1)
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0.0);
                waited += ns / 1e6;
            }
        }
    }
    (cpu, waited)
}

/// Pins every thread of process `pid` to `cpu` with util-linux's
/// `taskset`; reports (and carries on) when that is not possible.
pub(crate) fn pin(pid: u32, cpu: usize) {
    let ok = Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("could not pin process {pid} to core {cpu}: running unpinned");
    }
}

pub(crate) fn pinned() -> bool {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    !smoke() && cores >= 2 && std::env::var("BENCH_PIN").map_or(true, |v| v != "0")
}
