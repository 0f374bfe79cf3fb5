//! Every sample of a process's metrics page (Prometheus text format), with
//! its labels: what tests that read families or labels compare.

use std::collections::BTreeMap;

use crate::http_request;

/// One sample: a series' name, labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The metric's name (with its `_bucket`, `_sum` or `_count` suffix).
    pub name: String,
    /// Its labels, by name.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// The samples of `GET path` on 127.0.0.1:`port`. Panics when it does not
/// answer 200.
pub fn scrape(port: u16, path: &str) -> Vec<Sample> {
    let (status, text) = http_request(port, "GET", path, None, b"")
        .unwrap_or_else(|| panic!("nothing answers {path} on port {port}"));
    assert_eq!(status, 200, "{path} on port {port}: {text}");
    samples(&text)
}

/// The samples of a page in the text format (comments skipped).
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(sample)
        .collect()
}

/// One line's sample.
fn sample(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, labels(rest.strip_suffix('}')?)),
        None => (series, BTreeMap::new()),
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// `a="x",b="y\"z"` as a map (escapes undone).
fn labels(mut text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    while let Some((name, rest)) = text.split_once("=\"") {
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let mut end = rest.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(name.trim_start_matches(',').to_owned(), value);
        text = &rest[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_labels_and_values() {
        let s = samples("# HELP x y\nx_total{a=\"1\",b=\"q\\\"r\"} 3\nup 1\n");
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "x_total");
        assert_eq!(s[0].labels["a"], "1");
        assert_eq!(s[0].labels["b"], "q\"r");
        assert_eq!(s[0].value, 3.0);
        assert_eq!(s[1].name, "up");
    }
}
