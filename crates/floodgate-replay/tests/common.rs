//! Writing configurations and logs to a temporary directory and replaying
//! them.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use floodgate_replay::{
    CandidateSpec, LogFormat, LogSource, Replay, ReplayOptions, Variant, replay,
};

/// 2024-05-01T12:00:00Z in seconds.
pub(crate) const T0: u64 = 1_714_564_800;

pub(crate) struct Dir {
    pub dir: tempfile::TempDir,
}

impl Dir {
    pub(crate) fn new() -> Self {
        Dir {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    pub(crate) fn write_gz(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        let f = std::fs::File::create(&p).unwrap();
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        gz.finish().unwrap();
        p
    }

    pub(crate) fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap()
    }
}

pub(crate) fn options(configs: &[&PathBuf], logs: &[&PathBuf], format: &str) -> ReplayOptions {
    ReplayOptions {
        candidates: configs
            .iter()
            .map(|p| CandidateSpec::parse(&p.display().to_string()).unwrap())
            .collect(),
        logs: logs.iter().map(|p| LogSource::File((*p).clone())).collect(),
        format: format.parse::<LogFormat>().unwrap(),
        window: Duration::from_secs(10),
        ..Default::default()
    }
}

pub(crate) fn run(configs: &[&PathBuf], logs: &[&PathBuf], format: &str) -> Replay {
    replay(&options(configs, logs, format)).unwrap()
}

pub(crate) fn with_variants(mut o: ReplayOptions, v: &[Variant]) -> Replay {
    o.variants = v.to_vec();
    replay(&o).unwrap()
}

/// The decisions file's lines as JSON values.
pub(crate) fn decisions(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `(line, outcome)` of each decision.
pub(crate) fn outcomes(text: &str) -> Vec<(u64, String)> {
    decisions(text)
        .iter()
        .map(|d| {
            (
                d["line"].as_u64().unwrap(),
                d["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// An nginx `$msec` value for `T0 + ms` milliseconds.
pub(crate) fn msec(ms: u64) -> String {
    let t = T0 * 1000 + ms;
    format!("{}.{:03}", t / 1000, t % 1000)
}
