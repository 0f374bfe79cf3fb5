//! Checks of a table of settings, for the tests of the crates that
//! declare one: one precedence for every setting, documented defaults, the
//! documentation's table, names declared once.

use std::collections::HashMap;
use std::sync::Arc;

use floodgate_policy::error::Errors;
use floodgate_policy::yaml::Document;

use floodgate_runtime::settings::table::{
    Declared, Env, Envoy, Flags, InFile, Setting, Value, markdown, read,
};

/// One place a setting is given.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Level {
    Flag,
    Env,
    Envoy,
    File,
}

/// Settings given at each level, by key.
#[derive(Clone, Default)]
struct Given {
    flags: Vec<(&'static str, String)>,
    env: Vec<(String, String)>,
    file: Vec<(&'static str, String)>,
}

impl Given {
    /// The other settings `s` needs in the file to apply.
    fn context<T>(s: &Setting<T>) -> Self {
        let file = s.context.iter().filter(|(k, _)| *k != s.key);
        Given {
            file: file.map(|(k, v)| (*k, (*v).to_owned())).collect(),
            ..Given::default()
        }
    }

    fn at<T>(mut self, level: Level, s: &Setting<T>, value: &str) -> Self {
        match level {
            Level::Flag => self.flags.push((s.key, value.to_owned())),
            Level::Env => self.env.push((s.env.to_owned(), value.to_owned())),
            Level::Envoy => {
                let Some(Envoy::Var(name) | Envoy::NonZero(name)) = s.envoy else {
                    unreachable!("{}", s.key)
                };
                self.env.push((name.to_owned(), value.to_owned()));
            }
            Level::File => self.file.push((s.key, value.to_owned())),
        }
        self
    }

    /// What the settings given read into (`what` names the check when
    /// they do not).
    fn settings<T: Declared>(&self, what: &str) -> T {
        let mut flags = Flags::new();
        for (k, v) in &self.flags {
            flags.set(k, Value::one(v.clone()));
        }
        let env: HashMap<String, String> = self.env.iter().cloned().collect();
        let lookup = move |k: &str| env.get(k).cloned();
        let text = yaml(&self.file);
        let doc = Document::parse(&Arc::from("f.yaml"), &text).unwrap();
        let mut errors = Errors::default();
        let read = read(&flags, &Env::new(&lookup), &[doc], &[], &mut errors);
        match errors.finish(read) {
            Ok(Some((value, _))) => value,
            e => panic!(
                "{what}: {:?}\nfile:\n{text}",
                e.err().map(|e| e.to_string())
            ),
        }
    }
}

/// A YAML file giving dotted keys (`store.breaker.failures`), sorted so
/// that the keys of a group follow each other under it.
fn yaml(pairs: &[(&'static str, String)]) -> String {
    let mut pairs = pairs.to_vec();
    pairs.sort();
    let mut out = String::from("domains: []\n");
    let mut open: &[&str] = &[];
    let paths: Vec<Vec<&str>> = pairs.iter().map(|(k, _)| k.split('.').collect()).collect();
    for (path, (_, value)) in paths.iter().zip(&pairs) {
        let (leaf, parents) = path.split_last().expect("a key");
        let same = open.iter().zip(parents).take_while(|(a, b)| a == b).count();
        for (depth, name) in parents.iter().enumerate().skip(same) {
            out.push_str(&format!("{:1$}{name}:\n", "", depth * 2));
        }
        let value = value.replace('\'', "''");
        out.push_str(&format!("{:1$}{leaf}: '{value}'\n", "", parents.len() * 2));
        open = parents;
    }
    out
}

fn levels<T>(s: &Setting<T>) -> Vec<Level> {
    let mut l = Vec::new();
    if s.flag.is_some() {
        l.push(Level::Flag);
    }
    l.push(Level::Env);
    if matches!(s.envoy, Some(Envoy::Var(_) | Envoy::NonZero(_))) {
        l.push(Level::Envoy);
    }
    if s.in_file == InFile::Yes {
        l.push(Level::File);
    }
    l
}

/// Panics unless every setting of `T` is read in one order — flags,
/// environment (Floodgate's variable, then envoyproxy/ratelimit's), file,
/// default: each pair of adjacent places
/// given different values, each way round, must give what the stronger
/// one says alone. Every comparison runs twice for the Redis settings:
/// with the file choosing Redis, and with the file saying `memory` while a
/// flag chooses Redis (the other settings of the Redis store must survive
/// a backend chosen elsewhere).
pub fn check_precedence<T: Declared + PartialEq + std::fmt::Debug>() -> usize {
    let mut checked = 0;
    for s in T::table() {
        let [a, b] = s.test_values();
        let mut contexts = vec![Given::context(s)];
        if s.context.contains(&("store.backend", "redis")) {
            let mut flipped = contexts[0].clone();
            for (k, v) in &mut flipped.file {
                if *k == "store.backend" {
                    *v = "memory".into();
                }
            }
            flipped.flags.push(("store.backend", "redis".into()));
            contexts.push(flipped);
        }
        let levels = levels(s);
        for ctx in &contexts {
            // What a value does, given alone at the weakest place.
            let weakest = *levels.last().unwrap();
            let alone = |v: &str| ctx.clone().at(weakest, s, v).settings::<T>(s.key);
            let (with_a, with_b) = (alone(a), alone(b));
            assert_ne!(
                with_a, with_b,
                "{}: the samples must differ in effect",
                s.key
            );
            let default = ctx.settings::<T>(s.key);
            assert!(
                with_a != default || with_b != default,
                "{}: a sample must differ from the default",
                s.key
            );
            for pair in levels.windows(2) {
                let (strong, weak) = (pair[0], pair[1]);
                for (x, y, expected) in [(a, b, &with_a), (b, a, &with_b)] {
                    let got = ctx
                        .clone()
                        .at(strong, s, x)
                        .at(weak, s, y)
                        .settings::<T>(s.key);
                    assert_eq!(
                        &got, expected,
                        "{}: {strong:?} `{x}` must win over {weak:?} `{y}`",
                        s.key
                    );
                    checked += 1;
                }
            }
        }
    }
    checked
}

/// Panics unless the default each setting of `T` documents is the
/// default it has, wherever it is given.
pub fn check_defaults<T: Declared + PartialEq + std::fmt::Debug>() {
    for s in T::table() {
        if s.default.is_empty() {
            continue;
        }
        let ctx = Given::context(s);
        let level = *levels(s).last().unwrap();
        assert_eq!(
            ctx.clone().at(level, s, s.default).settings::<T>(s.key),
            ctx.settings::<T>(s.key),
            "{}: documented default `{}`",
            s.key,
            s.default
        );
    }
}

/// Panics unless the table of settings between `<!-- settings:NAME -->`
/// and `<!-- /settings:NAME -->` in the Markdown file `path` is
/// `T`'s; with `FLOODGATE_BLESS` set, rewrites it instead.
pub fn check_docs<T: Declared>(path: &std::path::Path, name: &str) {
    let doc = std::fs::read_to_string(path).unwrap();
    let (begin, end) = (
        format!("<!-- settings:{name} -->\n"),
        format!("<!-- /settings:{name} -->"),
    );
    let start = doc.find(&begin).expect("the settings marker") + begin.len();
    let stop = doc[start..].find(&end).expect("the end marker") + start;
    let table = markdown::<T>();
    if doc[start..stop] != table {
        if std::env::var_os("FLOODGATE_BLESS").is_some() {
            let updated = format!("{}{table}{}", &doc[..start], &doc[stop..]);
            std::fs::write(path, updated).unwrap();
        } else {
            panic!(
                "{}'s settings table differs from the declarations; \
                 regenerate it with FLOODGATE_BLESS=1 cargo test",
                path.display()
            );
        }
    }
}

/// Panics unless every key, variable and flag of `T` is declared once,
/// each with a line of documentation.
pub fn check_declared_once<T: Declared>() {
    let (mut keys, mut vars, mut flags) = (Vec::new(), Vec::new(), Vec::new());
    for s in T::table() {
        assert!(!keys.contains(&s.key), "{} twice", s.key);
        keys.push(s.key);
        assert!(!vars.contains(&s.env), "{} twice", s.env);
        vars.push(s.env);
        if let Some(f) = s.flag {
            assert!(!flags.contains(&f), "--{f} twice");
            flags.push(f);
        }
        assert!(!s.doc.is_empty(), "{}: no doc", s.key);
    }
}
