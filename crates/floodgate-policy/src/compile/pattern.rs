//! Wildcard values: `*` matches any run of characters (including none), and
//! may appear anywhere, any number of times (`foo*`, `*bar`, `a*b*c`).

/// A compiled wildcard pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// The literal parts between the stars, in order.
    parts: Box<[Box<str>]>,
    /// The pattern as written.
    text: Box<str>,
}

impl Pattern {
    /// The pattern of `text`, if it has a `*`.
    pub fn new(text: &str) -> Option<Pattern> {
        text.contains('*').then(|| Pattern {
            parts: text.split('*').map(Into::into).collect(),
            text: text.into(),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `value` matches the whole pattern.
    ///
    /// ```
    /// use floodgate_policy::compile::Pattern;
    /// let p = Pattern::new("/api/*/items*").unwrap();
    /// assert!(p.matches("/api/v1/items"));
    /// assert!(p.matches("/api/v2/items/7"));
    /// assert!(!p.matches("/api/v1/orders"));
    /// assert!(Pattern::new("*").unwrap().matches(""));
    /// ```
    pub fn matches(&self, value: &str) -> bool {
        let Some((first, rest)) = self.parts.split_first() else {
            return value.is_empty();
        };
        let Some(mut tail) = value.strip_prefix(&**first) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return tail.is_empty();
        };
        for part in middle {
            match tail.find(&**part) {
                Some(i) => tail = &tail[i + part.len()..],
                None => return false,
            }
        }
        tail.len() >= last.len() && tail.ends_with(&**last)
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    #[test]
    fn globbing() {
        let cases = [
            ("foo*", "foo", true),
            ("foo*", "foobar", true),
            ("foo*", "fo", false),
            ("*bar", "bar", true),
            ("*bar", "foobar", true),
            ("*bar", "barfoo", false),
            ("a*c", "abc", true),
            ("a*c", "ac", true),
            ("a*c", "ab", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "acb", false),
            ("*a*", "bab", true),
            ("ab*ba", "aba", false),
            ("**", "anything", true),
        ];
        for (p, v, want) in cases {
            assert_eq!(Pattern::new(p).unwrap().matches(v), want, "{p} ~ {v}");
        }
        assert!(Pattern::new("plain").is_none());
    }
}
