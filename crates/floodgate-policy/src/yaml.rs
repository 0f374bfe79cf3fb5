//! Reading YAML with positions: every node knows its file, line and column,
//! mappings track which keys were read so unknown ones can be reported, and
//! scalars are resolved here (so `value: 0123` stays the string `0123`, as
//! envoyproxy/ratelimit reads it).

use std::cell::Cell;
use std::sync::Arc;

use saphyr::{LoadableYamlNode, MarkedYamlOwned, YamlDataOwned, YamlLoader};
use saphyr_parser::{Parser, ScalarStyle};

use crate::error::{ConfigError, Location};

/// Largest configuration file accepted (16 MiB).
pub const MAX_FILE_BYTES: usize = 16 << 20;
/// Most nodes alias expansion may produce (a "billion laughs" guard).
const ALIAS_BUDGET: usize = 100_000;

/// A parsed YAML document.
#[derive(Debug)]
pub struct Document {
    root: MarkedYamlOwned,
    file: Arc<str>,
}

impl Document {
    /// Parses `text`, read from `file`. An empty document is an empty mapping.
    pub fn parse(file: &Arc<str>, text: &str) -> Result<Document, ConfigError> {
        if text.len() > MAX_FILE_BYTES {
            return Err(ConfigError::new(
                Location::file(file),
                format!("file is larger than {MAX_FILE_BYTES} bytes"),
            ));
        }
        let mut loader: YamlLoader<MarkedYamlOwned> = YamlLoader::default();
        loader.early_parse(false);
        loader.alias_limit(ALIAS_BUDGET);
        let mut parser = Parser::new_from_str(text);
        let scan = |e: &saphyr_parser::ScanError| {
            ConfigError::new(
                Location {
                    file: file.clone(),
                    line: e.marker().line(),
                    column: e.marker().col() + 1,
                },
                format!("error loading config file: {}", e.info()),
            )
        };
        parser.load(&mut loader, false).map_err(|e| scan(&e))?;
        if let Some(e) = loader.error() {
            return Err(scan(e));
        }
        let mut docs = loader.into_documents();
        let root = if docs.is_empty() {
            MarkedYamlOwned::load_from_str("{}")
                .ok()
                .and_then(|mut d| d.pop())
                .ok_or_else(|| ConfigError::new(Location::file(file), "empty document"))?
        } else {
            docs.swap_remove(0)
        };
        Ok(Document {
            root,
            file: file.clone(),
        })
    }

    /// The top node.
    pub fn root(&self) -> Node<'_> {
        Node {
            y: &self.root,
            file: &self.file,
        }
    }
}

/// A node of a [`Document`].
#[derive(Clone, Copy, Debug)]
pub struct Node<'a> {
    y: &'a MarkedYamlOwned,
    file: &'a Arc<str>,
}

/// Whether a plain scalar is YAML's null.
fn is_null_text(s: &str) -> bool {
    matches!(s, "" | "~" | "null" | "Null" | "NULL")
}

impl<'a> Node<'a> {
    /// Where the node starts.
    pub fn at(&self) -> Location {
        Location {
            file: self.file.clone(),
            line: self.y.span.start.line(),
            column: self.y.span.start.col() + 1,
        }
    }

    /// An error at this node.
    pub fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.at(), message)
    }

    /// What kind of node this is, for messages ("a mapping", "a list", ...).
    pub fn kind(&self) -> &'static str {
        match &self.y.data {
            YamlDataOwned::Mapping(_) => "a mapping",
            YamlDataOwned::Sequence(_) => "a list",
            _ if self.is_null() => "nothing",
            _ => "a scalar",
        }
    }

    /// True for an explicit or implicit null (`key:` with no value).
    pub fn is_null(&self) -> bool {
        match &self.y.data {
            YamlDataOwned::Representation(s, ScalarStyle::Plain, _) => is_null_text(s),
            YamlDataOwned::Value(saphyr::ScalarOwned::Null) => true,
            _ => false,
        }
    }

    /// The scalar's text, quoted or not; an error for mappings, lists and
    /// null.
    pub fn str(&self) -> Result<&'a str, ConfigError> {
        match &self.y.data {
            YamlDataOwned::Representation(s, style, _) => {
                if *style == ScalarStyle::Plain && is_null_text(s) {
                    Err(self.error("expected a string, found nothing"))
                } else {
                    Ok(s.as_str())
                }
            }
            _ => Err(self.error(format!("expected a string, found {}", self.kind()))),
        }
    }

    /// The scalar's text, if this is a non-null scalar.
    pub fn scalar_text(&self) -> Option<&'a str> {
        match &self.y.data {
            YamlDataOwned::Representation(s, style, _)
                if !(*style == ScalarStyle::Plain && is_null_text(s)) =>
            {
                Some(s.as_str())
            }
            _ => None,
        }
    }

    /// A boolean: `true`/`false`, and the YAML 1.1 spellings
    /// (`yes`/`no`/`on`/`off`, any case) that envoyproxy/ratelimit accepts.
    pub fn bool(&self) -> Result<bool, ConfigError> {
        let text = self.scalar_text().unwrap_or("");
        match text.to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" | "on" => Ok(true),
            "false" | "no" | "n" | "off" => Ok(false),
            _ => Err(self.error(format!("expected true or false, found {}", self.describe()))),
        }
    }

    /// A non-negative integer: decimal (with optional `_` separators) or
    /// `0x` hexadecimal.
    pub fn u64(&self) -> Result<u64, ConfigError> {
        let text = self.scalar_text().unwrap_or("");
        let clean: String = text.trim_start_matches('+').replace('_', "");
        let parsed = match clean.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None if !clean.is_empty() && clean.bytes().all(|b| b.is_ascii_digit()) => {
                clean.parse().ok()
            }
            None => None,
        };
        parsed.ok_or_else(|| {
            self.error(format!(
                "expected a non-negative integer, found {}",
                self.describe()
            ))
        })
    }

    /// A duration ([`read_duration`](crate::unit::read_duration)): zero
    /// only where `allow_zero`.
    pub fn duration(&self, allow_zero: bool) -> Result<std::time::Duration, ConfigError> {
        let Some(text) = self.scalar_text() else {
            return Err(self.error(format!("expected a duration, found {}", self.kind())));
        };
        crate::unit::read_duration(text, allow_zero).map_err(|m| self.error(m))
    }

    /// The node as a short quoted excerpt for messages.
    pub fn describe(&self) -> String {
        match self.scalar_text() {
            Some(s) => format!("`{}`", excerpt(s)),
            None => self.kind().to_string(),
        }
    }

    /// The node as a mapping.
    pub fn map(&self) -> Result<Map<'a>, ConfigError> {
        match &self.y.data {
            YamlDataOwned::Mapping(m) => {
                let mut entries = Vec::with_capacity(m.len());
                for (k, v) in m {
                    let key = Node {
                        y: k,
                        file: self.file,
                    };
                    let name = key
                        .scalar_text()
                        .ok_or_else(|| key.error("mapping keys must be strings"))?;
                    entries.push(MapEntry {
                        name,
                        key,
                        value: Node {
                            y: v,
                            file: self.file,
                        },
                        used: Cell::new(false),
                    });
                }
                Ok(Map {
                    node: *self,
                    entries,
                })
            }
            _ if self.is_null() => Ok(Map {
                node: *self,
                entries: Vec::new(),
            }),
            _ => Err(self.error(format!("expected a mapping, found {}", self.kind()))),
        }
    }

    /// The node as a list (null is an empty list).
    pub fn list(&self) -> Result<Vec<Node<'a>>, ConfigError> {
        match &self.y.data {
            YamlDataOwned::Sequence(items) => {
                Ok(items.iter().map(|y| Node { y, file: self.file }).collect())
            }
            _ if self.is_null() => Ok(Vec::new()),
            _ => Err(self.error(format!("expected a list, found {}", self.kind()))),
        }
    }
}

/// At most 80 characters of `s`, for messages.
pub fn excerpt(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push_str("...");
    }
    out.escape_debug().to_string()
}

/// The message for a key `name` (of the part of the file `within` names,
/// if given) that is not one of `allowed`: the keys allowed, and the
/// nearest of them when `name` looks like a misspelling.
///
/// ```
/// use floodgate_policy::yaml::unknown_key;
/// let allowed = ["domain", "descriptors", "allow", "deny"];
/// assert_eq!(
///     unknown_key("descriptor", None, &allowed),
///     "unknown key 'descriptor' (did you mean 'descriptors'? expected one of: domain, descriptors, allow, deny)"
/// );
/// assert_eq!(
///     unknown_key("zzz", Some("a domain"), &allowed),
///     "unknown key 'zzz' for a domain (expected one of: domain, descriptors, allow, deny)"
/// );
/// ```
pub fn unknown_key(name: &str, within: Option<&str>, allowed: &[&str]) -> String {
    let within = within.map(|w| format!(" for {w}")).unwrap_or_default();
    let near = nearest(name, allowed)
        .map(|k| format!("did you mean '{k}'? "))
        .unwrap_or_default();
    format!(
        "unknown key '{}'{within} ({near}expected one of: {})",
        excerpt(name),
        allowed.join(", ")
    )
}

/// The candidate most like `name`, if one is alike enough to be what was
/// meant (Jaro–Winkler similarity above 0.8, as for misspelt commands).
pub fn nearest<'c>(name: &str, candidates: &[&'c str]) -> Option<&'c str> {
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(name, c), *c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[derive(Debug)]
struct MapEntry<'a> {
    name: &'a str,
    key: Node<'a>,
    value: Node<'a>,
    used: Cell<bool>,
}

/// A mapping whose reads are tracked, so the keys nobody read can be
/// reported as unknown.
#[derive(Debug)]
pub struct Map<'a> {
    node: Node<'a>,
    entries: Vec<MapEntry<'a>>,
}

impl<'a> Map<'a> {
    /// The mapping's own node.
    pub fn node(&self) -> Node<'a> {
        self.node
    }

    /// The value of `key`, if present and not null; marks it read.
    pub fn get(&self, key: &str) -> Option<Node<'a>> {
        let e = self.entries.iter().find(|e| e.name == key)?;
        e.used.set(true);
        (!e.value.is_null()).then_some(e.value)
    }

    /// Whether `key` is present (even with a null value); marks it read.
    pub fn has(&self, key: &str) -> bool {
        self.entries.iter().any(|e| {
            let hit = e.name == key;
            if hit {
                e.used.set(true);
            }
            hit
        })
    }

    /// The value of `key`, or an error naming it.
    pub fn required(&self, key: &str) -> Result<Node<'a>, ConfigError> {
        self.get(key)
            .ok_or_else(|| self.node.error(format!("missing required key '{key}'")))
    }

    /// Every key, in file order, with its key node.
    pub fn keys(&self) -> impl Iterator<Item = (&'a str, Node<'a>)> + '_ {
        self.entries.iter().map(|e| (e.name, e.key))
    }

    /// Every entry, in file order, marking all read.
    pub fn entries(&self) -> impl Iterator<Item = (&'a str, Node<'a>)> + '_ {
        self.entries.iter().map(|e| {
            e.used.set(true);
            (e.name, e.value)
        })
    }

    /// The keys nobody read, with their positions.
    pub fn unread(&self) -> impl Iterator<Item = (&'a str, Node<'a>)> + '_ {
        self.entries
            .iter()
            .filter(|e| !e.used.get())
            .map(|e| (e.name, e.key))
    }

    /// An error for every unread key: `unknown key 'x'` plus the keys
    /// allowed here.
    pub fn deny_unknown(&self, allowed: &[&str]) -> Vec<ConfigError> {
        self.unread()
            .map(|(name, key)| key.error(unknown_key(name, None, allowed)))
            .collect()
    }
}
