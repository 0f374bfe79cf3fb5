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
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.chars().next() {
            Some('{') => match parse_labels(&rest[1..]) {
                Some((labels, after)) => (labels, after),
                None => continue,
            },
            Some(' ') => (Vec::new(), rest),
            _ => continue,
        };
        let Some(value) = value.split_whitespace().next().and_then(|v| v.parse().ok()) else {
            continue;
        };
        out.push(Sample { labels, value });
    }
    out
}

/// `k="v",k2="v2"}` with Prometheus escapes (`\\`, `\"`, `\n`); the
/// labels and the rest of the line after `}`.
fn parse_labels(s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    let mut rest = s;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim_start_matches(',').trim().to_owned();
        let mut chars = rest[eq + 1..].char_indices();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                c => value.push(c),
            }
        }
        labels.push((key, value));
        rest = &rest[end?..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
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
