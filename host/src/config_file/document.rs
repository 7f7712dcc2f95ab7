//! A parsed config file that remembers the order of its keys (and repeated keys),
//! so problems can be reported in document order and duplicates noticed.
//! Parsing is serde_json's; this is only the tree it fills in.

use std::collections::HashMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Number, Value};

/// A JSON value whose objects keep their keys in document order, repeats included.
/// Serialized, it writes its keys in that order too, so a tool that edits a file
/// does not reorder it.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Number(Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Node>),
    /// An object: its entries in document order.
    Object(Vec<(String, Node)>),
}

/// An object's entries, in document order.
pub(super) type Object = [(String, Node)];

impl Node {
    pub(super) fn as_object(&self) -> Option<&Object> {
        match self {
            Node::Object(entries) => Some(entries),
            _ => None,
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            Node::String(s) => Some(s),
            _ => None,
        }
    }

    pub(super) fn as_bool(&self) -> Option<bool> {
        match self {
            Node::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub(super) fn as_array(&self) -> Option<&[Node]> {
        match self {
            Node::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The same value as a `serde_json::Value` (a repeated key keeps its last value,
    /// as serde_json does).
    pub fn to_value(&self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::String(s) => Value::String(s.clone()),
            Node::Array(items) => Value::Array(items.iter().map(Node::to_value).collect()),
            Node::Object(entries) => {
                Value::Object(entries.iter().map(|(k, v)| (k.clone(), v.to_value())).collect::<Map<_, _>>())
            }
        }
    }
}

/// `key`'s value in `obj` (its last one if repeated), treating an explicit `null`
/// as absent.
pub(super) fn present<'a>(obj: &'a Object, key: &str) -> Option<&'a Node> {
    obj.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v).filter(|v| **v != Node::Null)
}

/// `key` under the object at `path` (the top level when `path` is empty).
pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The position in the document of every path in it (`a.b`, `a.list[2]`), in the
/// order they appear; the top level is 0.
pub(super) fn ordinals(root: &Node) -> HashMap<String, usize> {
    fn walk(node: &Node, path: String, out: &mut HashMap<String, usize>) {
        let next = out.len();
        out.entry(path.clone()).or_insert(next);
        match node {
            Node::Object(entries) => entries.iter().for_each(|(k, v)| walk(v, join(&path, k), out)),
            Node::Array(items) => items.iter().enumerate().for_each(|(i, v)| walk(v, format!("{path}[{i}]"), out)),
            _ => {}
        }
    }
    let mut out = HashMap::new();
    walk(root, String::new(), &mut out);
    out
}

/// Where `path` is in the document: its own position, else its nearest ancestor's
/// (a missing required field is reported where its object is).
pub(super) fn position(ordinals: &HashMap<String, usize>, path: &str) -> usize {
    let mut path = path;
    loop {
        if let Some(&at) = ordinals.get(path) {
            return at;
        }
        match path.rfind(['.', '[']) {
            Some(cut) => path = &path[..cut],
            None => return 0,
        }
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => serializer.serialize_unit(),
            Node::Bool(b) => serializer.serialize_bool(*b),
            Node::Number(n) => n.serialize(serializer),
            Node::String(s) => serializer.serialize_str(s),
            Node::Array(items) => items.serialize(serializer),
            Node::Object(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        // JSON has no NaN or infinity, so this is always a number.
        Ok(Number::from_f64(v).map_or(Node::Null, Node::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<String, Node>()? {
            entries.push(entry);
        }
        Ok(Node::Object(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_and_repeats() {
        let node: Node = serde_json::from_str(r#"{"b": 1, "a": [true, null, "x"], "b": 2.5}"#).unwrap();
        let keys: Vec<&str> = node.as_object().unwrap().iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["b", "a", "b"]);
        assert_eq!(node.to_value(), serde_json::json!({"a": [true, null, "x"], "b": 2.5}));
        let order = ordinals(&node);
        assert_eq!((order[""], order["b"], order["a"], order["a[2]"]), (0, 1, 2, 5));
        assert_eq!(position(&order, "a.missing.deeper"), 2);
        assert_eq!(position(&order, "elsewhere"), 0);
    }
}
