//! The top-level fields of a JSON object with their values left as raw text:
//! what the gateway needs of a request's params (and of their `_meta`) to
//! route and forward it without building a tree.

use alloc::collections::BTreeMap;
use serde_json::value::RawValue;

use super::scan::Scan;
use super::Text;

/// An object key borrowed from the frame when it has no escapes.
type Key<'a> = Text<'a>;

/// The top-level fields of an object, values left as raw JSON text and keys
/// borrowed from the frame. Up to [`RawFields::INLINE`] fields (every MCP
/// request's params) live on the stack in arrival order; a larger object moves
/// to a map. A repeated key keeps its last value, as JSON parsers do.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // on the stack on purpose: that is the point
pub(crate) enum RawFields<'a> {
    /// Few fields, in arrival order.
    Few(heapless::Vec<(Key<'a>, &'a str), { RawFields::INLINE }>),
    /// Many fields, in key order.
    Many(BTreeMap<Key<'a>, &'a str>),
}

impl Default for RawFields<'_> {
    fn default() -> Self {
        RawFields::Few(heapless::Vec::new())
    }
}

impl<'a> RawFields<'a> {
    const INLINE: usize = 8;

    /// The fields of the object `text`: scanned in one pass when its keys have
    /// no escapes, else parsed by `serde_json` (which decodes them). `None`: not
    /// a JSON object.
    pub(crate) fn parse(text: &'a str) -> Option<RawFields<'a>> {
        let mut fields = RawFields::default();
        let mut scan = Scan::new(text);
        if scan.next_token() == Some(b'{') && fields.scan_object(&mut scan).is_some_and(|(_, all)| all) && scan.at_end()
        {
            return Some(fields);
        }
        serde_json::from_str(text).ok()
    }

    /// Scans the object at `scan`'s position into these (empty) fields, checking
    /// every value; returns the object's text, and whether the fields are all
    /// here (not when a key has escapes: `serde_json` must decode them).
    pub(crate) fn scan_object(&mut self, scan: &mut Scan<'a>) -> Option<(&'a str, bool)> {
        let mut complete = true;
        let text = scan.object(|scan| {
            let (key, escaped) = match known_key(scan) {
                Some(key) => (key, false),
                None => scan.key()?,
            };
            let value = scan.value()?;
            complete &= !escaped;
            if complete {
                self.insert(Text(key.into()), value);
            }
            Some(())
        })?;
        Some((text, complete))
    }

    /// The raw value of field `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&'a str> {
        match self {
            RawFields::Few(v) => v.iter().find(|(k, _)| &**k == name).map(|(_, v)| *v),
            RawFields::Many(m) => m.get(name).copied(),
        }
    }

    /// Every field once, in arrival order (small objects) or key order (large).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Key<'a>, &'a str)> + '_ {
        let few = match self {
            RawFields::Few(v) => Some(v.iter().map(|(k, v)| (k, *v))),
            RawFields::Many(_) => None,
        };
        let many = match self {
            RawFields::Many(m) => Some(m.iter().map(|(k, v)| (k, *v))),
            RawFields::Few(_) => None,
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    fn insert(&mut self, key: Key<'a>, value: &'a str) {
        match self {
            RawFields::Few(v) => {
                if let Some(slot) = v.iter_mut().find(|(k, _)| *k == key) {
                    slot.1 = value;
                } else if let Err((key, value)) = v.push((key, value)) {
                    let mut map: BTreeMap<_, _> = core::mem::take(v).into_iter().collect();
                    map.insert(key, value);
                    *self = RawFields::Many(map);
                }
            }
            RawFields::Many(m) => {
                m.insert(key, value);
            }
        }
    }
}

/// The key that comes next when it is one requests' params most often have
/// (`name`, `arguments`, `_meta`), read without scanning it.
fn known_key(scan: &mut Scan<'_>) -> Option<&'static str> {
    match scan.key_initial()? {
        b'n' => scan.known_key(br#""name""#).then_some("name"),
        b'a' => scan.known_key(br#""arguments""#).then_some("arguments"),
        b'_' => scan.known_key(br#""_meta""#).then_some("_meta"),
        _ => None,
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for RawFields<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(core::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = RawFields<'a>;
            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<RawFields<'a>, M::Error> {
                let mut fields = RawFields::default();
                while let Some((key, value)) = map.next_entry::<Key<'a>, &'a RawValue>()? {
                    fields.insert(key, value.get());
                }
                Ok(fields)
            }
        }
        deserializer.deserialize_map(Visitor(core::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn pairs<'a>(fields: &'a RawFields<'a>) -> Vec<(&'a str, &'a str)> {
        fields.iter().map(|(k, v)| (&**k, v)).collect()
    }

    #[test]
    fn scanned_fields_are_the_ones_serde_json_finds() {
        for text in [
            r#"{}"#,
            r#" {"name":"a","arguments":{"x":[1,2]},"_meta":{"progressToken":3}} "#,
            r#"{"a":1,"a":2,"b":3}"#,
            r#"{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k3":"x"}"#,
            r#"{"n\u0061me":"a","b":1}"#,
        ] {
            let ours = RawFields::parse(text).unwrap();
            let theirs: RawFields<'_> = serde_json::from_str(text).unwrap();
            assert_eq!(pairs(&ours), pairs(&theirs), "{text}");
        }
        for text in ["[]", "{", r#"{"a":1} x"#, "null"] {
            assert!(RawFields::parse(text).is_none(), "{text}");
        }
    }
}
