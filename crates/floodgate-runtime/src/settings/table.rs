//! Settings declared once, read from four places in one order.
//!
//! A [`Setting`] names its key in the configuration file, its environment
//! variables (Floodgate's, and envoyproxy/ratelimit's where one exists), its
//! command-line flag, its default and what it does. [`read`] takes each
//! setting's value from the first place that gives one — **flag, then
//! environment, then file, then default** — and hands it to the setting's
//! parser, so the precedence is the same for every setting by
//! construction. A setting given nowhere gets its declared default, through
//! the same parser: a default is written once, in its declaration. The
//! same declarations make the flags ([`add_flags`]) and the documentation's
//! tables ([`markdown`]).

use std::collections::HashMap;
use std::sync::Arc;

use floodgate_policy::error::{ConfigError, Errors, Location};
use floodgate_policy::yaml::{Document, Node};

/// What a setting's value looks like: its flag's value name, and two
/// valid values for the precedence test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `true`/`false` (a flag alone means `true`).
    Bool,
    /// A duration (`0`, Go's syntax such as `1.5s` or `1m30s`, `1d`).
    Duration,
    /// A size (`64KiB`, `1MiB`, a number of bytes).
    Size,
    /// A whole number.
    Count,
    /// A listen address (`host:port`, `:port`, a port, `off`).
    Addr,
    /// A number (a ratio).
    Number,
    /// Text (a name, a filter, a path, a URL).
    Text,
    /// One of a few words.
    Choice,
    /// A list (a YAML list, a repeated flag, or commas).
    List,
}

impl Kind {
    /// The flag's value name.
    pub fn value_name(self) -> &'static str {
        match self {
            Kind::Bool => "BOOL",
            Kind::Duration => "DURATION",
            Kind::Size => "SIZE",
            Kind::Count => "N",
            Kind::Addr => "ADDR",
            Kind::Number => "NUMBER",
            Kind::Text | Kind::Choice => "VALUE",
            Kind::List => "LIST",
        }
    }

    fn samples(self) -> Option<[&'static str; 2]> {
        Some(match self {
            Kind::Bool => ["true", "false"],
            Kind::Duration => ["1500ms", "3s"],
            Kind::Size => ["4KiB", "8KiB"],
            Kind::Count => ["7", "9"],
            Kind::Addr => ["127.0.0.1:1001", "127.0.0.1:1002"],
            Kind::Number => ["0.25", "0.5"],
            Kind::Text => ["alpha", "beta"],
            Kind::Choice | Kind::List => return None,
        })
    }
}

/// Where envoyproxy/ratelimit reads a setting from, for teams migrating
/// from it (read after Floodgate's own variable).
#[derive(Clone, Copy, Debug)]
pub enum Envoy {
    /// This variable, read as the setting's value.
    Var(&'static str),
    /// This variable; `0` means "not set" (the default stays).
    NonZero(&'static str),
    /// A host and a port variable, either alone: `host:port`, the host
    /// defaulting to all interfaces and the port to this one (as
    /// envoyproxy/ratelimit joins them).
    HostPort(&'static str, &'static str, u16),
    /// Variables converted to the setting's value (`names` for the docs).
    Read {
        /// The variables, as the docs name them.
        names: &'static str,
        /// Their value as the setting's, if they give one.
        read: fn(&Env<'_>) -> EnvoyRead,
    },
}

/// What an [`Envoy::Read`] finds: the setting's value and the variable it
/// came from, or what is wrong and with which variable (named in the
/// messages about it).
pub type EnvoyRead = Result<Option<(&'static str, String)>, (&'static str, String)>;

impl Envoy {
    /// The variables, as the docs name them.
    pub fn names(&self) -> String {
        match self {
            Envoy::Var(n) => format!("`{n}`"),
            Envoy::NonZero(n) => format!("`{n}` (`0`: the default)"),
            Envoy::HostPort(h, p, _) => format!("`{h}` + `{p}`"),
            Envoy::Read { names, .. } => (*names).to_owned(),
        }
    }

    /// The variables read (those of [`Envoy::Read`]: the ones its `names`
    /// writes in backticks).
    pub fn variables(&self) -> Vec<&'static str> {
        match self {
            Envoy::Var(n) | Envoy::NonZero(n) => vec![n],
            Envoy::HostPort(h, p, _) => vec![h, p],
            Envoy::Read { names, .. } => names
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|n| {
                    n.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                })
                .collect(),
        }
    }

    fn read(&self, env: &Env<'_>) -> EnvoyRead {
        let found = |var: &'static str, v: Option<String>| Ok(v.map(|v| (var, v)));
        match self {
            Envoy::Var(n) => found(n, env.get(n)),
            Envoy::NonZero(n) => found(
                n,
                env.get(n).filter(|v| {
                    let v = v.trim();
                    v != "0" && v != "0s"
                }),
            ),
            Envoy::HostPort(host, port, default) => env.host_port(host, port, "0.0.0.0", *default),
            Envoy::Read { read, .. } => read(env),
        }
    }
}

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Nowhere: the default.
    Default,
    /// The configuration file, at this position.
    File(Location),
    /// This environment variable.
    Env(&'static str),
    /// This flag.
    Flag(&'static str),
}

impl Origin {
    /// The position for a message about the value.
    pub fn at(&self) -> Location {
        let name = match self {
            Origin::Default => "the default",
            Origin::File(at) => return at.clone(),
            Origin::Env(n) => n,
            Origin::Flag(f) => return Location::file(&Arc::from(format!("--{f}").as_str())),
        };
        Location::file(&Arc::from(name))
    }

    /// How strongly it was given: flag 3, environment 2, file 1, default 0.
    pub fn rank(&self) -> u8 {
        match self {
            Origin::Default => 0,
            Origin::File(_) => 1,
            Origin::Env(_) => 2,
            Origin::Flag(_) => 3,
        }
    }

    /// An error about the value at its origin.
    pub fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.at(), message)
    }
}

/// A setting's value: one item, or several (a YAML list, a repeated
/// flag).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value(Vec<String>);

impl Value {
    /// A single value.
    pub fn one(text: impl Into<String>) -> Self {
        Value(vec![text.into()])
    }

    /// Several values.
    pub fn many(items: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Value(items.into_iter().map(Into::into).collect())
    }

    /// The text (the items joined with commas).
    pub fn text(&self) -> String {
        self.0.join(",")
    }

    /// Every item.
    pub fn items(&self) -> &[String] {
        &self.0
    }
}

/// The environment: a lookup (blank values count as unset).
pub struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

impl<'a> Env<'a> {
    /// The environment `lookup` reads (such as `|k| std::env::var(k).ok()`).
    pub fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Env(lookup)
    }

    /// A variable's value, unless unset or blank.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    /// `host:port` from a host and a port variable, if either is set: each
    /// half defaults on its own (the host to `default_host`, empty for
    /// `:port`; the port to `default_port`), an IPv6 host in brackets, as
    /// envoyproxy/ratelimit's `net.JoinHostPort`. The variable named is
    /// the port's when it is set, else the host's.
    pub(super) fn host_port(
        &self,
        host: &'static str,
        port: &'static str,
        default_host: &str,
        default_port: u16,
    ) -> EnvoyRead {
        let (h, p) = (self.get(host), self.get(port));
        let var = if p.is_some() { port } else { host };
        if h.is_none() && p.is_none() {
            return Ok(None);
        }
        let p: u16 = match p {
            None => default_port,
            Some(p) => p
                .trim()
                .parse()
                .map_err(|_| (port, format!("expected a port number, found `{p}`")))?,
        };
        let h = h.map_or_else(|| default_host.to_owned(), |h| h.trim().to_owned());
        let value = if h.contains(':') && !h.starts_with('[') {
            format!("[{h}]:{p}")
        } else {
            format!("{h}:{p}")
        };
        Ok(Some((var, value)))
    }
}

/// Whether and where the configuration file gives a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InFile {
    /// At the setting's key, read here.
    Yes,
    /// Not in the file.
    No,
    /// At the setting's key, read by the policy loader (the setting
    /// overrides the file's value there).
    Policies,
}

/// One setting of a settings structure `T`.
pub struct Setting<T> {
    /// The key: its path in the file (`server.shutdown_delay`).
    pub key: &'static str,
    /// Whether the file gives it.
    pub in_file: InFile,
    /// Floodgate's environment variable.
    pub env: &'static str,
    /// envoyproxy/ratelimit's, if any.
    pub envoy: Option<Envoy>,
    /// The long flag (none for secrets, which flags would show to every
    /// user of the machine).
    pub flag: Option<&'static str>,
    /// The value's form.
    pub kind: Kind,
    /// The default, as written in the file, applied by the setting's
    /// parser when no place gives a value (empty: none, the structure's
    /// blank stays).
    pub default: &'static str,
    /// What it does, in one line.
    pub doc: &'static str,
    /// Parses a value into `T`.
    pub set: fn(&mut T, &Value) -> Result<(), String>,
    /// Two valid values with different effects (for the precedence test;
    /// the kind's by default).
    pub samples: Option<[&'static str; 2]>,
    /// Other settings the precedence test gives in the file, for this one
    /// to apply (`store.master` needs `store.mode: sentinel`).
    pub context: &'static [(&'static str, &'static str)],
}

impl<T> Setting<T> {
    /// A setting at `key` (in the file), its variable, flag (empty: none),
    /// form, default and line of documentation, parsed by `set`.
    pub fn new(
        key: &'static str,
        env: &'static str,
        flag: &'static str,
        kind: Kind,
        default: &'static str,
        doc: &'static str,
        set: fn(&mut T, &Value) -> Result<(), String>,
    ) -> Self {
        Setting {
            key,
            in_file: InFile::Yes,
            env,
            envoy: None,
            flag: (!flag.is_empty()).then_some(flag),
            kind,
            default,
            doc,
            set,
            samples: None,
            context: &[],
        }
    }

    /// With envoyproxy/ratelimit's variable(s).
    pub fn envoy(mut self, envoy: Envoy) -> Self {
        self.envoy = Some(envoy);
        self
    }

    /// Not in the file (or read there by the policy loader).
    pub fn in_file(mut self, in_file: InFile) -> Self {
        self.in_file = in_file;
        self
    }

    /// With these two values for the precedence test.
    pub fn samples(mut self, a: &'static str, b: &'static str) -> Self {
        self.samples = Some([a, b]);
        self
    }

    /// With these settings in the file for the precedence test.
    pub fn context(mut self, context: &'static [(&'static str, &'static str)]) -> Self {
        self.context = context;
        self
    }

    /// The two values of the precedence test.
    pub fn test_values(&self) -> [&'static str; 2] {
        self.samples
            .or(self.kind.samples())
            .unwrap_or_else(|| panic!("{}: samples needed for the precedence test", self.key))
    }
}

/// Values given on the command line, by setting key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flags(HashMap<&'static str, Value>);

impl Flags {
    /// No flags.
    pub fn new() -> Self {
        Flags::default()
    }

    /// Sets a flag's value (as the command line gave it).
    pub fn set(&mut self, key: &'static str, value: Value) {
        self.0.insert(key, value);
    }

    /// With `key` given `value` (as one flag would).
    pub fn with(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.set(key, Value::one(value));
        self
    }

    /// The value given for `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// Adds the flags of `T`'s settings found in `matches`.
    pub fn read_matches<T: Declared>(&mut self, matches: &clap::ArgMatches) {
        for s in T::table().iter().filter(|s| s.flag.is_some()) {
            if let Ok(Some(values)) = matches.try_get_many::<String>(s.key) {
                let items: Vec<String> = values.cloned().collect();
                if !items.is_empty() {
                    self.set(s.key, Value(items));
                }
            }
        }
    }
}

/// Adds a flag for every setting of `T` that has one, under the help
/// heading `heading`.
pub fn add_flags<T: Declared>(mut cmd: clap::Command, heading: &'static str) -> clap::Command {
    for s in T::table() {
        let Some(flag) = s.flag else { continue };
        let mut arg = clap::Arg::new(s.key)
            .long(flag)
            .value_name(s.kind.value_name())
            .help(s.doc)
            .help_heading(heading);
        arg = match s.kind {
            Kind::Bool => arg
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true"),
            Kind::List => arg.action(clap::ArgAction::Append),
            _ => arg,
        };
        if flag == "config" {
            arg = arg.short('c').action(clap::ArgAction::Append);
        }
        cmd = cmd.arg(arg);
    }
    cmd
}

/// The keys a file may write under `path` (`server` → `grpc`, `limits`,
/// ...): `T`'s in the table's order, then those `others` read.
fn children<T>(
    table: &'static [Setting<T>],
    others: &[&'static str],
    path: &str,
) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    let own = table
        .iter()
        .filter(|s| s.in_file == InFile::Yes)
        .map(|s| s.key);
    for key in own.chain(others.iter().copied()) {
        let Some(rest) = key.strip_prefix(path).and_then(|r| r.strip_prefix('.')) else {
            continue;
        };
        let child = rest.split('.').next().unwrap_or(rest);
        if !out.contains(&child) {
            out.push(child);
        }
    }
    out
}

/// A structure read from declared settings: the runtime's
/// [`Settings`](super::Settings), the gateway's.
pub trait Declared: Sized + 'static {
    /// Every setting, in the order they are applied.
    fn table() -> &'static [Setting<Self>];

    /// Groups a file may write as one of their settings (`sync: lease`
    /// for `sync: {mode: lease}`): the group's key, the setting's.
    const SHORTHANDS: &'static [(&'static str, &'static str)] = &[];

    /// The structure before any setting is applied, defaults included.
    fn blank() -> Self;

    /// Completes the structure once every setting is read without error
    /// (where settings combine), adding any problem to `errors`.
    fn finish(&mut self, _origins: &Origins, _errors: &mut Errors) {}

    /// Every setting at its declared default: read from nothing.
    fn defaults() -> Self {
        let read = read(
            &Flags::new(),
            &Env::new(&|_| None),
            &[],
            &[],
            &mut Errors::default(),
        );
        read.expect("the declared defaults are valid").0
    }
}

/// Reads every setting of `T` from the first place that gives it:
/// `flags`, then `env` (Floodgate's variable, then envoyproxy/ratelimit's),
/// then the sections of `documents`, then its declared default, and
/// [finishes](Declared::finish) the structure. Keys of `T`'s sections that
/// `others` read (another reader of a shared section: `server.grpc` is
/// the service's) are left to them. Every problem is added to `errors`,
/// each at its origin (a file position, a variable, a flag); `None` when a
/// setting did not read.
pub fn read<T: Declared>(
    flags: &Flags,
    env: &Env<'_>,
    documents: &[Document],
    others: &[&'static str],
    errors: &mut Errors,
) -> Option<(T, Origins)> {
    let file = FileValues::read::<T>(documents, others, errors);
    let mut origins = Origins {
        given: HashMap::new(),
        sections: file.sections.clone(),
    };
    let mut value = T::blank();
    let mut failed = false;
    for s in T::table() {
        let (origin, given) = match pick(s, flags, env, &file) {
            Ok(Some(given)) => given,
            Ok(None) if s.default.is_empty() => continue,
            Ok(None) => (Origin::Default, Value::one(s.default)),
            Err(e) => {
                errors.push(e);
                failed = true;
                continue;
            }
        };
        if let Err(m) = (s.set)(&mut value, &given) {
            // In the file, the message names the key (the others name it
            // as their origin).
            let message = match &origin {
                Origin::File(_) => format!("{}: {m}", s.key.rsplit('.').next().unwrap_or(s.key)),
                _ => m,
            };
            errors.push(origin.error(message));
            failed = true;
        } else if origin != Origin::Default {
            origins.given.insert(s.key, origin);
        }
    }
    if failed {
        return None;
    }
    value.finish(&origins, errors);
    Some((value, origins))
}

/// The values a file gives, by setting key, with their positions.
#[derive(Debug, Default)]
pub(crate) struct FileValues {
    values: HashMap<&'static str, (Location, Value)>,
    sections: HashMap<String, Location>,
}

impl FileValues {
    /// Reads the sections of `documents` that `T` declares (each may
    /// appear in one file only): every key must be a setting, or a group
    /// of settings (`server.log`), or a shorthand
    /// ([`Declared::SHORTHANDS`]), or a key `others` read (left to
    /// them). Problems are added to `errors`.
    pub(crate) fn read<T: Declared>(
        documents: &[Document],
        others: &[&'static str],
        errors: &mut Errors,
    ) -> FileValues {
        let mut values = FileValues::default();
        let mut sections: Vec<&str> = Vec::new();
        for s in T::table().iter().filter(|s| s.in_file == InFile::Yes) {
            let section = s.key.split('.').next().unwrap_or(s.key);
            if !sections.contains(&section) {
                sections.push(section);
            }
        }
        for doc in documents {
            let Some(root) = errors.take(doc.root().map()) else {
                continue;
            };
            for &section in &sections {
                let Some(node) = root.get(section) else {
                    continue;
                };
                if let Some(at) = values.sections.get(section) {
                    errors.push(node.error(format!("'{section}' is already given in {at}")));
                    continue;
                }
                values.sections.insert(section.to_owned(), node.at());
                values.walk::<T>(node, section, others, errors);
            }
        }
        values
    }

    fn walk<T: Declared>(
        &mut self,
        node: Node<'_>,
        path: &str,
        others: &[&'static str],
        errors: &mut Errors,
    ) {
        let Some(map) = errors.take(node.map()) else {
            return;
        };
        let table = T::table();
        for (name, child) in map.entries() {
            let key = format!("{path}.{name}");
            if let Some(s) = table
                .iter()
                .find(|s| s.in_file == InFile::Yes && s.key == key)
            {
                self.take(child, s.key, s.kind, errors);
                continue;
            }
            let group = format!("{key}.");
            if !table.iter().any(|s| s.key.starts_with(&group)) {
                if !others.iter().any(|o| *o == key || o.starts_with(&group)) {
                    let known = children(table, others, path);
                    let message = floodgate_policy::yaml::unknown_key(name, None, &known);
                    errors.push(child.error(message));
                }
                continue;
            }
            let is_map = child.map().is_ok() && !child.is_null();
            match T::SHORTHANDS.iter().find(|(g, _)| *g == key) {
                Some((_, target)) if !is_map => {
                    let kind = table
                        .iter()
                        .find(|s| s.key == *target)
                        .map_or(Kind::Text, |s| s.kind);
                    self.take(child, target, kind, errors);
                }
                _ => self.walk::<T>(child, &key, others, errors),
            }
        }
    }

    fn take(&mut self, node: Node<'_>, key: &'static str, kind: Kind, errors: &mut Errors) {
        let items: Vec<String> = match node.list() {
            Ok(list) if kind == Kind::List && !node.is_null() => list
                .iter()
                .filter_map(|i| errors.take(i.str()).map(str::to_owned))
                .collect(),
            _ => match node.scalar_text() {
                Some(t) => vec![t.to_owned()],
                None => {
                    errors.push(node.error(format!(
                        "{}: expected a value, found {}",
                        key.rsplit('.').next().unwrap_or(key),
                        node.kind()
                    )));
                    return;
                }
            },
        };
        self.values.insert(key, (node.at(), Value(items)));
    }

    /// Whether both say the same (wherever they say it).
    pub(crate) fn same_values(&self, other: &FileValues) -> bool {
        self.values.len() == other.values.len()
            && self
                .values
                .iter()
                .all(|(k, (_, v))| other.values.get(k).is_some_and(|(_, w)| v == w))
    }
}

/// Says at WARN which settings of `T` (`binary`'s: another command's) the
/// sections of `documents` give, and where: the command running ignores
/// them.
pub fn warn_not_read<T: Declared>(documents: &[Document], binary: &str) {
    let given = file_keys::<T>(documents);
    if given.is_empty() {
        return;
    }
    let keys: Vec<String> = given.iter().map(|(k, at)| format!("{k} ({at})")).collect();
    tracing::warn!(
        settings = %keys.join(", "),
        "settings of `{binary}` only: this command does not read them"
    );
}

/// The settings of `T` that the sections of `documents` give, with where,
/// in the files' order.
fn file_keys<T: Declared>(documents: &[Document]) -> Vec<(&'static str, Location)> {
    let file = FileValues::read::<T>(documents, &[], &mut Errors::default());
    let mut given: Vec<(&'static str, Location)> = file
        .values
        .into_iter()
        .map(|(k, (at, _))| (k, at))
        .collect();
    given.sort_by(|(_, a), (_, b)| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    given
}

/// Where each setting's value came from (settings left at their default
/// are absent), and where the file has each section.
#[derive(Clone, Debug, Default)]
pub struct Origins {
    given: HashMap<&'static str, Origin>,
    sections: HashMap<String, Location>,
}

impl Origins {
    /// Where `key`'s value came from.
    pub fn of(&self, key: &str) -> Origin {
        self.given.get(key).cloned().unwrap_or(Origin::Default)
    }

    /// Whether `key` was given (not left at its default).
    pub fn given(&self, key: &str) -> bool {
        self.given.contains_key(key)
    }

    /// Where the file has `section`, if it has it.
    pub fn section(&self, section: &str) -> Option<&Location> {
        self.sections.get(section)
    }
}

/// The value of `s` from the first place that gives it.
fn pick<T>(
    s: &Setting<T>,
    flags: &Flags,
    env: &Env<'_>,
    file: &FileValues,
) -> Result<Option<(Origin, Value)>, ConfigError> {
    if let (Some(flag), Some(v)) = (s.flag, flags.get(s.key)) {
        return Ok(Some((Origin::Flag(flag), v.clone())));
    }
    if let Some(v) = env.get(s.env) {
        return Ok(Some((Origin::Env(s.env), Value::one(v))));
    }
    if let Some(e) = &s.envoy {
        match e.read(env) {
            Ok(Some((var, v))) => return Ok(Some((Origin::Env(var), Value::one(v)))),
            Ok(None) => {}
            Err((var, m)) => return Err(Origin::Env(var).error(m)),
        }
    }
    if let Some((at, v)) = file.values.get(s.key) {
        return Ok(Some((Origin::File(at.clone()), v.clone())));
    }
    Ok(None)
}

/// The settings of `T` as a Markdown table: key, variables, flag,
/// default, meaning.
pub fn markdown<T: Declared>() -> String {
    let mut out = String::from(
        "| setting | environment | envoyproxy/ratelimit | flag | default | meaning |\n|---|---|---|---|---|---|\n",
    );
    for s in T::table() {
        let key = match s.in_file {
            InFile::No => "—".to_owned(),
            _ => format!("`{}`", s.key),
        };
        let envoy = s.envoy.map_or(String::new(), |e| e.names());
        let flag = s.flag.map_or(String::new(), |f| format!("`--{f}`"));
        let default = if s.default.is_empty() {
            String::new()
        } else {
            format!("`{}`", s.default)
        };
        out.push_str(&format!(
            "| {key} | `{}` | {envoy} | {flag} | {default} | {} |\n",
            s.env, s.doc
        ));
    }
    out
}
