//! What decoding reads: a parsed JSON value, seen through [`Json`].
//!
//! The decoder needs only to look at a parsed value, never to own or change it, so it reads
//! through this view. Two representations implement it: `serde_json::Value` (what every reader
//! of the crate builds) and [`crate::source::doc::Doc`], a flat tape that `hash` parses objects
//! into because building it costs a fraction of a `Value`. Both say the same of the same JSON,
//! with an object's keys in their order. JSON input never repeats a key in one object here (the
//! readers refuse it: [`crate::kubelet::once_keys`]); a `Value` read from YAML keeps a repeated
//! key at its first position with its last value, as Go's YAML reader keeps the last one.

use serde_json::{Number, Value};

/// A view of one parsed JSON value that lives as long as `'a`.
pub trait Json<'a>: Copy + 'a {
    /// The elements of a list, in order.
    type Items: Iterator<Item = Self>;
    /// The entries of an object, in order.
    type Entries: Iterator<Item = (&'a str, Self)>;

    /// Which JSON value this is, with its contents.
    fn view(self) -> JsonValue<'a, Self>;

    /// An object's value for `key` with the key as stored, if it is an object that has one.
    fn entry(self, key: &str) -> Option<(&'a str, Self)>;

    /// The same address for the same value while it is borrowed (decodes shared by type graphs
    /// are keyed by it).
    fn address(self) -> usize;

    fn as_str(self) -> Option<&'a str> {
        match self.view() {
            JsonValue::String(s) => Some(s),
            _ => None,
        }
    }

    fn is_object(self) -> bool {
        matches!(self.view(), JsonValue::Object(..))
    }

    fn is_list_or_object(self) -> bool {
        matches!(self.view(), JsonValue::Array(..) | JsonValue::Object(..))
    }

    /// An object's value for `key`.
    fn field(self, key: &str) -> Option<Self> {
        self.entry(key).map(|(_, v)| v)
    }
}

/// One JSON value of a [`Json`] view. Lists and objects carry their length and their contents.
pub enum JsonValue<'a, J: Json<'a>> {
    Null,
    Bool(bool),
    Number(&'a Number),
    String(&'a str),
    Array(usize, J::Items),
    Object(usize, J::Entries),
}

impl<'a, J: Json<'a>> JsonValue<'a, J> {
    /// The value's type for messages: `string`, `number 1.5`, `object`, ….
    pub fn describe(&self) -> String {
        match self {
            JsonValue::Null => "null".into(),
            JsonValue::Bool(b) => format!("bool {b}"),
            JsonValue::Number(n) => format!("number {n}"),
            JsonValue::String(_) => "string".into(),
            JsonValue::Array(..) => "list".into(),
            JsonValue::Object(..) => "object".into(),
        }
    }

    /// The value's type with its article, for "expected …, got a string".
    pub fn a_kind(&self) -> &'static str {
        match self {
            JsonValue::Null => "null",
            JsonValue::Bool(_) => "a bool",
            JsonValue::Number(_) => "a number",
            JsonValue::String(_) => "a string",
            JsonValue::Array(..) => "a list",
            JsonValue::Object(..) => "an object",
        }
    }
}

/// The `Value` a view shows (for messages that print a value, and for tests).
pub fn to_value<'a>(j: impl Json<'a>) -> Value {
    match j.view() {
        JsonValue::Null => Value::Null,
        JsonValue::Bool(b) => Value::Bool(b),
        JsonValue::Number(n) => Value::Number(n.clone()),
        JsonValue::String(s) => Value::String(s.into()),
        JsonValue::Array(_, items) => Value::Array(items.map(to_value).collect()),
        JsonValue::Object(_, entries) => {
            Value::Object(entries.map(|(k, v)| (k.to_string(), to_value(v))).collect())
        }
    }
}

/// An object's entries as `(&str, &Value)`.
pub struct ValueEntries<'a>(serde_json::map::Iter<'a>);

impl<'a> Iterator for ValueEntries<'a> {
    type Item = (&'a str, &'a Value);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k.as_str(), v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<'a> Json<'a> for &'a Value {
    type Items = std::slice::Iter<'a, Value>;
    type Entries = ValueEntries<'a>;

    fn view(self) -> JsonValue<'a, Self> {
        match self {
            Value::Null => JsonValue::Null,
            Value::Bool(b) => JsonValue::Bool(*b),
            Value::Number(n) => JsonValue::Number(n),
            Value::String(s) => JsonValue::String(s),
            Value::Array(items) => JsonValue::Array(items.len(), items.iter()),
            Value::Object(obj) => JsonValue::Object(obj.len(), ValueEntries(obj.iter())),
        }
    }

    fn entry(self, key: &str) -> Option<(&'a str, Self)> {
        self.as_object()?
            .get_key_value(key)
            .map(|(k, v)| (k.as_str(), v))
    }

    fn address(self) -> usize {
        std::ptr::from_ref(self) as usize
    }
}
