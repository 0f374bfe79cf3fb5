//! What `floodgate --help` says of the commands.

use std::process::Command;

/// The first line names every command the list under "Commands:" offers.
#[test]
fn the_summary_names_every_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.lines().next().unwrap_or_default();
    let commands: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 5, "{text}");
    for c in commands {
        assert!(summary.contains(c), "`{c}` missing from: {summary}");
    }
}
