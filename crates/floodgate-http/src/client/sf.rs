//! A tolerant reader of the Structured Field Lists rate-limit headers use:
//! String or Token items with parameters. Anything it cannot read makes
//! the whole field unreadable (`None`): malformed fields are ignored, as
//! the draft requires.

/// A parameter value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// An Integer.
    Int(i64),
    /// A String or Token.
    Text(String),
    /// A Boolean (a key without a value is `true`).
    Bool(bool),
    /// A Decimal, Byte Sequence or anything else: kept only as present.
    Other,
}

/// One list item: its identifier and parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Member {
    /// The String or Token identifier, or the Integer as text (draft-03's
    /// `RateLimit-Limit: 100, 100;w=10`).
    pub id: String,
    /// Parameters in order.
    pub params: Vec<(String, Value)>,
}

impl Member {
    /// The Integer parameter `key`.
    pub fn int(&self, key: &str) -> Option<i64> {
        self.params.iter().find_map(|(k, v)| match v {
            Value::Int(i) if k == key => Some(*i),
            _ => None,
        })
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn skip(&mut self, f: impl Fn(u8) -> bool) {
        while self.peek().is_some_and(&f) {
            self.i += 1;
        }
    }
    fn take(&mut self, f: impl Fn(u8) -> bool) -> &str {
        let start = self.i;
        self.skip(f);
        std::str::from_utf8(&self.s[start..self.i]).unwrap_or("")
    }
    fn string(&mut self) -> Option<String> {
        self.i += 1;
        let mut out = String::new();
        loop {
            match self.peek()? {
                b'\\' => {
                    self.i += 1;
                    match self.peek()? {
                        c @ (b'"' | b'\\') => out.push(c as char),
                        _ => return None,
                    }
                }
                b'"' => {
                    self.i += 1;
                    return Some(out);
                }
                c @ 0x20..=0x7e => out.push(c as char),
                _ => return None,
            }
            self.i += 1;
        }
    }
    fn bare(&mut self) -> Option<Value> {
        match self.peek()? {
            b'"' => self.string().map(Value::Text),
            b'-' | b'0'..=b'9' => {
                let t = self.take(|c| c == b'-' || c == b'.' || c.is_ascii_digit());
                if t.contains('.') {
                    Some(Value::Other)
                } else if t.trim_start_matches('-').len() > 15 {
                    None
                } else {
                    t.parse().ok().map(Value::Int)
                }
            }
            b'?' => {
                let t = self.take(|c| c == b'?' || c == b'0' || c == b'1');
                match t {
                    "?1" => Some(Value::Bool(true)),
                    "?0" => Some(Value::Bool(false)),
                    _ => None,
                }
            }
            b':' => {
                self.i += 1;
                self.skip(|c| c != b':');
                self.i += 1;
                Some(Value::Other)
            }
            c if c.is_ascii_alphabetic() || c == b'*' => {
                let t = self.take(|c| c.is_ascii_graphic() && !b",;=\"()".contains(&c));
                Some(Value::Text(t.to_owned()))
            }
            _ => None,
        }
    }
}

/// Reads a List of Items (several field lines count as one list, joined
/// with commas by the caller). `None` when malformed.
///
/// ```
/// use floodgate_http::client::parse_list;
/// let l = parse_list(r#""day";r=100;t=36000, hour;r=5;x-vendor=?1"#).unwrap();
/// assert_eq!(l[0].id, "day");
/// assert_eq!(l[0].int("t"), Some(36000));
/// assert_eq!(l[1].id, "hour");
/// assert!(parse_list(r#""day";r=1;t="#).is_none());
/// ```
pub fn parse_list(text: &str) -> Option<Vec<Member>> {
    let mut c = Cursor {
        s: text.as_bytes(),
        i: 0,
    };
    let sp = |b: u8| b == b' ' || b == b'\t';
    let mut out = Vec::new();
    c.skip(sp);
    if c.peek().is_none() {
        return Some(out);
    }
    loop {
        let id = match c.bare()? {
            Value::Text(t) => t,
            Value::Int(i) => i.to_string(),
            _ => return None,
        };
        let mut m = Member {
            id,
            params: Vec::new(),
        };
        while c.peek() == Some(b';') {
            c.i += 1;
            c.skip(|b| b == b' ');
            let key =
                c.take(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b));
            if key.is_empty() {
                return None;
            }
            let key = key.to_owned();
            let value = if c.peek() == Some(b'=') {
                c.i += 1;
                c.bare()?
            } else {
                Value::Bool(true)
            };
            m.params.push((key, value));
        }
        out.push(m);
        c.skip(sp);
        match c.peek() {
            None => return Some(out),
            Some(b',') => {
                c.i += 1;
                c.skip(sp);
                c.peek()?;
            }
            Some(_) => return None,
        }
    }
}
