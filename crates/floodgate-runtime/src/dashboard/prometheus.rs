//! Reading counters back from the Prometheus exposition the admin
//! listener serves: the dashboard shows the same numbers as `/metrics`.

/// One sample: its labels and value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sample {
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub(crate) fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of metric `name` in the text exposition `text`.
pub(crate) fn samples(text: &str, name: &str) -> Vec<Sample> {
    let sample = |rest: &str| {
        let (labels, rest) = match rest.strip_prefix('{') {
            Some(inside) => parse_labels(inside)?,
            None if rest.starts_with(' ') => (Vec::new(), rest),
            None => return None,
        };
        let value = rest.split_whitespace().next()?.parse().ok()?;
        Some(Sample { labels, value })
    };
    text.lines()
        .filter_map(|line| sample(line.strip_prefix(name)?))
        .collect()
}

/// `k="v",k2="v2"}` with Prometheus escapes (`\\`, `\"`, `\n`); the
/// labels and the rest of the line after `}`.
fn parse_labels(mut rest: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start_matches(',');
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, quoted) = rest.split_once('=')?;
        let quoted = quoted.strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        rest = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (i, '"') => break &quoted[i + 1..],
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_owned(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_labels_and_escapes() {
        let text = "# HELP x y\n\
            floodgate_rule_decisions_total{domain=\"api\",rule=\"a\\\"b,c}\",outcome=\"over_limit\"} 7\n\
            floodgate_rule_decisions_total{domain=\"api\",rule=\"x\\\\y\",outcome=\"within_limit\"} 12.5\n\
            floodgate_rule_decisions_total_other{domain=\"api\"} 1\n\
            floodgate_config_last_reload_ok 1\n";
        let s = samples(text, "floodgate_rule_decisions_total");
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].label("rule"), Some("a\"b,c}"));
        assert_eq!(s[0].label("outcome"), Some("over_limit"));
        assert_eq!(s[0].value, 7.0);
        assert_eq!(s[1].label("rule"), Some("x\\y"));
        assert_eq!(s[1].value, 12.5);
        let g = samples(text, "floodgate_config_last_reload_ok");
        assert_eq!(
            g,
            vec![Sample {
                labels: vec![],
                value: 1.0
            }]
        );
        assert!(samples("floodgate_x{broken 1\n", "floodgate_x").is_empty());
    }
}
