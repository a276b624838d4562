//! The rules a payload field is read by (behaviour §9.2), for every payload type (each
//! lives in the module of the function that receives it).
//!
//! Owns: [`Fields`] (typed, range-checked reads of one payload object or a nested
//! one), [`PayloadError`] (names the field and the rule, never the value), the
//! [`Payload`] trait every payload type implements, the string bounds, the rule
//! that a cursor's `index` stays within the ids visited, and the two macros a payload
//! type's module uses: `validated_deserialize!` (its `Deserialize` goes through its
//! decoder, strictly) and `cursor_run!` (a run whose one field is its cursor).

use chrono::NaiveDate;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::strict::Strict;

/// A payload field that breaks its rule: the field's path and the rule, never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadError {
    /// The field, dotted for nested ones (`cursor.index`).
    pub field: String,
    /// The rule it breaks.
    pub rule: String,
}

impl std::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid payload: field `{}` {}", self.field, self.rule)
    }
}

/// A decoder's result: the value, or the field and rule it breaks.
pub type Checked<T> = std::result::Result<T, PayloadError>;

/// The fields of one payload object (or a nested one), read by rule.
pub struct Fields<'a> {
    obj: &'a Map<String, Value>,
    prefix: String,
}

/// Longest free-text payload string (a reason, a resource path).
pub const TEXT_MAX_CHARS: usize = 1024;
/// Longest name in a payload (GitLab's limit for token and resource names).
pub const NAME_MAX_CHARS: usize = 255;
/// Groups above a project or group at most (GitLab's `NUMBER_OF_ANCESTORS_ALLOWED`).
pub const ANCESTORS_MAX: usize = 20;
/// Longest full path GitLab can store: [`ANCESTORS_MAX`] groups and the resource
/// itself, each path at most [`NAME_MAX_CHARS`], joined by `/`. Both ends use it: the
/// receiver's decoder accepts every path the sender can read from GitLab.
pub const FULL_PATH_MAX_CHARS: usize = (ANCESTORS_MAX + 1) * (NAME_MAX_CHARS + 1) - 1;

impl<'a> Fields<'a> {
    fn top(v: &'a Value) -> Checked<Fields<'a>> {
        match v {
            Value::Object(obj) => Ok(Fields {
                obj,
                prefix: String::new(),
            }),
            _ => Err(PayloadError {
                field: "payload".into(),
                rule: "must be an object".into(),
            }),
        }
    }

    fn path(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// An error for `name` breaking `rule`.
    pub fn err(&self, name: &str, rule: &str) -> PayloadError {
        PayloadError {
            field: self.path(name),
            rule: rule.to_string(),
        }
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    /// The value of `name`, which must be present and not `null`.
    pub fn required(&self, name: &str) -> Checked<&'a Value> {
        self.get(name).ok_or_else(|| self.err(name, "is required"))
    }

    /// An integer in `lo..=hi`.
    pub fn int(&self, name: &str, lo: i64, hi: i64) -> Checked<i64> {
        let rule = || format!("must be an integer in {lo}..={hi}");
        self.required(name)?
            .as_i64()
            .filter(|n| (lo..=hi).contains(n))
            .ok_or_else(|| self.err(name, &rule()))
    }

    /// A database id: an integer ≥ 1.
    pub fn id(&self, name: &str) -> Checked<i64> {
        self.int(name, 1, i64::MAX)
    }

    /// An optional id (absent or `null` is `None`).
    pub fn opt_id(&self, name: &str) -> Checked<Option<i64>> {
        self.get(name).map(|_| self.id(name)).transpose()
    }

    /// A string of at most `max` characters.
    pub fn text(&self, name: &str, max: usize) -> Checked<String> {
        match self.required(name)? {
            Value::String(s) if s.chars().count() <= max => Ok(s.clone()),
            _ => Err(self.err(
                name,
                &format!("must be a string of at most {max} characters"),
            )),
        }
    }

    /// An optional string of at most `max` characters.
    pub fn opt_text(&self, name: &str, max: usize) -> Checked<Option<String>> {
        self.get(name).map(|_| self.text(name, max)).transpose()
    }

    /// A date written exactly `YYYY-MM-DD`.
    pub fn date(&self, name: &str) -> Checked<NaiveDate> {
        let rule = "must be a date written YYYY-MM-DD";
        match self.required(name)? {
            Value::String(s)
                if s.len() == 10
                    && s.bytes().enumerate().all(|(i, b)| {
                        if i == 4 || i == 7 {
                            b == b'-'
                        } else {
                            b.is_ascii_digit()
                        }
                    }) =>
            {
                NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| self.err(name, rule))
            }
            _ => Err(self.err(name, rule)),
        }
    }

    /// A nested object.
    pub fn object(&self, name: &str) -> Checked<Fields<'a>> {
        match self.required(name)? {
            Value::Object(obj) => Ok(Fields {
                obj,
                prefix: self.path(name),
            }),
            _ => Err(self.err(name, "must be an object")),
        }
    }

    /// An optional nested object.
    pub fn opt_object(&self, name: &str) -> Checked<Option<Fields<'a>>> {
        self.get(name).map(|_| self.object(name)).transpose()
    }
}

/// A payload type: its one validating decoder (every field's type and range, behaviour §9.2).
pub trait Payload: Sized {
    /// Decode and validate the payload's fields. Unknown fields are ignored.
    fn from_payload(f: &Fields<'_>) -> Checked<Self>;

    /// Decode and validate a payload value (it must be an object).
    fn from_value(v: &Value) -> Checked<Self> {
        Self::from_payload(&Fields::top(v)?)
    }

    /// The cursor of a continuing run, for the `start` line (none by default).
    fn cursor(&self) -> Option<Value> {
        None
    }
}

/// A cursor's run-wide `index` counts children of rows with ids up to the cursor's
/// id (≥ 0; 0 reads from the start), each at most once, and row ids are ≥ 1: so
/// `index <= id`. Anything larger is not a cursor this bundle wrote.
pub fn index_within(c: &Fields<'_>, index: u64, id: i64) -> Checked<()> {
    if i64::try_from(index).is_ok_and(|i| i <= id) {
        Ok(())
    } else {
        Err(c.err(
            "index",
            "must not exceed the cursor's id (one index per visited row)",
        ))
    }
}

/// Decode a `T` through its validating decoder from a strict body (no repeated key):
/// what `validated_deserialize!` makes a payload type's `Deserialize`.
pub fn deserialize_validated<'de, T: Payload, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<T, D::Error> {
    let Strict(v) = Strict::deserialize(d)?;
    T::from_value(&v).map_err(serde::de::Error::custom)
}

/// `Deserialize` through the validating decoder, so no path decodes a payload unchecked.
macro_rules! validated_deserialize {
    ($($t:ty),* $(,)?) => {$(
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                $crate::messages::deserialize_validated(d)
            }
        }
    )*};
}
pub(crate) use validated_deserialize;

/// [`Payload`] of a run whose one field is its optional keyset `cursor`.
macro_rules! cursor_run {
    ($($run:ident($cursor:ident)),* $(,)?) => {$(
        impl $crate::messages::Payload for $run {
            fn from_payload(f: &$crate::messages::Fields<'_>) -> $crate::messages::Checked<Self> {
                let cursor = f
                    .opt_object("cursor")?
                    .map(|c| <$cursor as $crate::messages::Payload>::from_payload(&c));
                Ok($run { cursor: cursor.transpose()? })
            }

            fn cursor(&self) -> Option<serde_json::Value> {
                self.cursor.and_then(|c| serde_json::to_value(c).ok())
            }
        }
    )*};
}
pub(crate) use cursor_run;
