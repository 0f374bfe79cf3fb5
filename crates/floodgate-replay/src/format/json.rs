//! JSON access log lines (Envoy's `json_format`, JSON lines of any
//! logger): one object per line, its fields given roles by name. Strings
//! are borrowed from the line unless they had escapes.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use super::nginx::parse_ip;
use super::time;
use super::{Fields, LineError, Provides};
use crate::record::{HeaderSet, Parsed, Span};

/// What a field of the object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The arrival time (RFC 3339, `$time_local`, or an epoch number).
    Start,
    /// The time the line was written, at the end of the request: the
    /// arrival is this minus the elapsed time.
    End,
    /// Time from arrival to the line (subtracted from `End`), in units of
    /// this many nanoseconds.
    Elapsed(u64),
    /// How long the request took (not subtracted), in units of this many
    /// nanoseconds.
    Duration(u64),
    Method,
    /// The path (a query is cut off).
    Path,
    /// The client address (a port is allowed).
    Address,
    Status,
    /// A request header, by position in the header set.
    Header(usize),
    /// An object of request headers, by name.
    Headers,
}

/// Field names and their roles.
#[derive(Clone, Debug, Default)]
pub(crate) struct JsonFormat {
    /// Each field name read, and what it gives.
    pub fields: Vec<(String, Role)>,
    /// Header positions by lowercase name, for [`Role::Headers`] objects.
    pub header_names: Vec<String>,
}

impl JsonFormat {
    /// The role of field `key`, if it is read.
    fn role(&self, key: &str) -> Option<Role> {
        self.fields.iter().find(|(k, _)| k == key).map(|&(_, r)| r)
    }

    /// Whether some field plays a role `pred` accepts.
    fn has(&self, pred: impl Fn(Role) -> bool) -> bool {
        self.fields.iter().any(|(_, r)| pred(*r))
    }

    /// What lines give, of what a replay needs (`headers`: the headers
    /// the identities read).
    pub(crate) fn provides(&self, headers: &HeaderSet) -> Provides {
        let mut given: Vec<String> = self
            .fields
            .iter()
            .filter_map(|(_, r)| match r {
                Role::Header(i) => Some(headers.names()[*i].as_str().to_owned()),
                _ => None,
            })
            .collect();
        if self.has(|r| r == Role::Headers) {
            given.extend(self.header_names.iter().cloned());
        }
        given.sort();
        given.dedup();
        Provides {
            address: self.has(|r| r == Role::Address),
            path: self.has(|r| r == Role::Path),
            method: self.has(|r| r == Role::Method),
            duration: self.has(|r| matches!(r, Role::Elapsed(_) | Role::Duration(_))),
            headers: given,
        }
    }

    /// Checks that the format can date a line.
    pub(crate) fn check(self) -> Result<Self, String> {
        if self.has(|r| matches!(r, Role::Start | Role::End)) {
            Ok(self)
        } else {
            Err("the format names no time field".into())
        }
    }

    /// Parses the line `text[start..end]`.
    pub(crate) fn parse(
        &self,
        text: &[u8],
        start: usize,
        end: usize,
        extra: &mut Vec<u8>,
        hdrs: &mut [Span],
    ) -> Result<Fields, LineError> {
        let line = &text[start..end];
        let mut state = State {
            format: self,
            base: text.as_ptr() as usize,
            text_len: text.len(),
            extra,
            hdrs,
            fields: Fields::default(),
            start: None,
            end: None,
            elapsed: None,
            error: None,
        };
        let mut de = serde_json::Deserializer::from_slice(line);
        let parsed = LineSeed(&mut state)
            .deserialize(&mut de)
            .and_then(|()| de.end());
        if let Some(e) = state.error.take() {
            return Err(e);
        }
        parsed.map_err(|e| LineError::at(e.column().saturating_sub(1), json_reason(&e)))?;
        let mut f = state.fields;
        f.time = match (state.start, state.end) {
            (Some(t), _) => t,
            (None, Some(t)) => t.saturating_sub(state.elapsed.unwrap_or(0)),
            (None, None) => return Err(LineError::at(0, "has no time field")),
        };
        if f.duration.is_none() {
            f.duration = state.elapsed;
        }
        Ok(f)
    }
}

/// Why a line is not a JSON object, without serde_json's position (the
/// column is reported apart).
fn json_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    // serde_json appends " at line L column C": the column is reported apart.
    match text.find(" at line ") {
        Some(i) => format!("is not a JSON object ({})", &text[..i]),
        None => format!("is not a JSON object ({text})"),
    }
}

/// A line being read: where its values go, the times found so far, and
/// the first error.
struct State<'f, 'x> {
    /// The fields to read.
    format: &'f JsonFormat,
    /// The address of the text the line is in (a value borrowed from it
    /// is kept as its span there).
    base: usize,
    /// The length of that text.
    text_len: usize,
    /// Values that had to be unescaped.
    extra: &'x mut Vec<u8>,
    /// The span of each header the identities read.
    hdrs: &'x mut [Span],
    /// The fields read so far.
    fields: Fields,
    /// When the request arrived, if logged.
    start: Option<u64>,
    /// When it ended, if logged.
    end: Option<u64>,
    /// How long it took, to tell its arrival from its end.
    elapsed: Option<u64>,
    /// The first field that did not fit its role.
    error: Option<LineError>,
}

impl State<'_, '_> {
    /// The span of a string value: borrowed from the line when it is, else
    /// copied to the unescaped values.
    fn span(&mut self, s: &str) -> Span {
        let at = (s.as_ptr() as usize).wrapping_sub(self.base);
        if at < self.text_len && at + s.len() <= self.text_len {
            Parsed::span(at, at + s.len())
        } else {
            Parsed::push_extra(self.extra, |out| out.extend_from_slice(s.as_bytes()))
        }
    }

    /// Fails the line for field `key` (the first failure is reported).
    fn fail(&mut self, key: &str, what: &str) {
        if self.error.is_none() {
            self.error = Some(LineError::at(0, format!("field `{key}` {what}")));
        }
    }

    /// Takes the value `v` of field `key` as `role` (nothing for a null or
    /// `-`); a value that does not fit the role fails the line.
    fn set(&mut self, key: &str, role: Role, v: Scalar<'_>) {
        let text = match v {
            Scalar::Null => return,
            Scalar::Str("" | "-") => return,
            _ => v.text(),
        };
        let bytes = text.as_bytes();
        match role {
            Role::Start | Role::End => self.set_time(key, role, &v, bytes),
            Role::Elapsed(unit) | Role::Duration(unit) => {
                self.set_duration(key, role, unit, &v, bytes);
            }
            Role::Method | Role::Path => self.set_request(key, role, &v),
            Role::Address => match parse_ip(bytes) {
                Some(ip) => self.fields.peer = Some(ip),
                None => self.fail(key, "is not an address"),
            },
            Role::Status => match text.parse::<u16>() {
                Ok(s) => self.fields.status = s,
                Err(_) => self.fail(key, "is not a status"),
            },
            Role::Header(i) => {
                let s = match &v {
                    Scalar::Str(s) => Some(*s),
                    Scalar::Owned(s) => Some(s.as_str()),
                    _ => None,
                };
                if let Some(s) = s {
                    let span = self.span(s);
                    if let Some(h) = self.hdrs.get_mut(i) {
                        *h = span;
                    }
                }
            }
            Role::Headers => {}
        }
    }

    /// A start or end time: seconds since the epoch as a number (its
    /// scale told by its size), or any time text (`bytes`).
    fn set_time(&mut self, key: &str, role: Role, v: &Scalar<'_>, bytes: &[u8]) {
        let t = match v {
            Scalar::F64(x) => float_nanos(*x),
            _ => time::any(bytes),
        };
        match t {
            Some(t) if role == Role::Start => self.start = Some(t),
            Some(t) => self.end = Some(t),
            None => self.fail(key, "is not a time"),
        }
    }

    /// An elapsed time or a duration, in `unit` (nanoseconds each); its
    /// text is `bytes`.
    fn set_duration(&mut self, key: &str, role: Role, unit: u64, v: &Scalar<'_>, bytes: &[u8]) {
        let d = match v {
            Scalar::F64(x) if *x >= 0.0 => Some((x * unit as f64) as u64),
            _ if unit == time::NANOS => time::seconds(bytes),
            _ => time::scaled(bytes, unit),
        };
        match (d, role) {
            (Some(d), Role::Elapsed(_)) => self.elapsed = Some(d),
            (Some(d), _) => self.fields.duration = Some(d),
            (None, _) => self.fail(key, "is not a duration"),
        }
    }

    /// The method, or the path (its query left out): strings only.
    fn set_request(&mut self, key: &str, role: Role, v: &Scalar<'_>) {
        let s = match v {
            Scalar::Str(s) => *s,
            Scalar::Owned(s) => s.as_str(),
            _ => return self.fail(key, "is not a string"),
        };
        let s = if role == Role::Path {
            s.split('?').next().unwrap_or_default()
        } else {
            s
        };
        let span = self.span(s);
        if role == Role::Path {
            self.fields.path = span;
        } else {
            self.fields.method = span;
        }
    }
}

/// Seconds since the epoch as a number, in nanoseconds: values too large
/// for seconds are read as milliseconds, microseconds or nanoseconds.
fn float_nanos(x: f64) -> Option<u64> {
    if !(0.0..1e19).contains(&x) {
        return None;
    }
    let n = x as u64;
    Some(if n < 100_000_000_000 {
        (x * 1e9) as u64
    } else if n < 100_000_000_000_000 {
        (x * 1e6) as u64
    } else if n < 100_000_000_000_000_000 {
        (x * 1e3) as u64
    } else {
        n
    })
}

/// A scalar value, borrowed when possible.
enum Scalar<'a> {
    Null,
    Str(&'a str),
    Owned(String),
    U64(u64),
    F64(f64),
    Bool(bool),
}

impl Scalar<'_> {
    /// The value as text (numbers and booleans as JSON writes them).
    fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Scalar::Null => "".into(),
            Scalar::Str(s) => (*s).into(),
            Scalar::Owned(s) => s.as_str().into(),
            Scalar::U64(n) => n.to_string().into(),
            Scalar::F64(x) => x.to_string().into(),
            Scalar::Bool(b) => b.to_string().into(),
        }
    }
}

/// Reads any JSON value as a [`Scalar`] (objects and arrays refused).
struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string, a number, a boolean or null")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Owned(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Scalar::Owned(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Scalar::U64(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Scalar::F64(v as f64))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Scalar::F64(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
}

/// Reads one value with [`ScalarVisitor`].
struct ScalarSeed;

impl<'de> DeserializeSeed<'de> for ScalarSeed {
    type Value = Scalar<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

/// A key, borrowed when it has no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(v.into()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(v.to_owned().into()))
            }
        }
        d.deserialize_str(V)
    }
}

/// Reads a line's object into its state, skipping fields not read.
struct LineSeed<'s, 'f, 'x>(&'s mut State<'f, 'x>);

impl<'de> DeserializeSeed<'de> for LineSeed<'_, '_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LineSeed<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match self.0.format.role(&key.0) {
                Some(Role::Headers) => map.next_value_seed(HeadersSeed(self.0))?,
                Some(role) => {
                    let v = map.next_value_seed(ScalarSeed)?;
                    self.0.set(&key.0, role, v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Reads an object of headers, keeping those the identities read.
struct HeadersSeed<'s, 'f, 'x>(&'s mut State<'f, 'x>);

impl<'de> DeserializeSeed<'de> for HeadersSeed<'_, '_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeadersSeed<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of headers")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let position = self
                .0
                .format
                .header_names
                .iter()
                .position(|n| n.eq_ignore_ascii_case(&key.0));
            match position {
                Some(i) => {
                    let v = map.next_value_seed(ScalarSeed)?;
                    self.0.set(&key.0, Role::Header(i), v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}
