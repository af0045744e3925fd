//! A borrowed JSON tree: what the relay parses request bodies and wire items into when it only
//! reads them (no map node, key or string copy per field, as a `serde_json::Value` makes).

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;

/// A JSON value parsed from text, borrowing every string that has no escapes. Parsed by the
/// same `serde_json` parser as `Value` (same grammar, depth limit, number reading and error
/// texts); objects keep their members in order and a lookup takes the last of a repeated key,
/// which is what `Value` (and `JSON.parse`) keep. Numbers are kept as `Value::as_f64` reads
/// them: a caller that must echo a number exactly re-reads the text as a `Value`.
#[derive(Debug)]
pub enum Node<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as `Value::as_f64` reads it.
    Number(f64),
    /// A string, borrowed when it had no escapes.
    Text(Cow<'a, str>),
    /// An array, in order.
    Array(Vec<Node<'a>>),
    /// An object's members in order, repeats kept (a lookup takes the last).
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl<'a> Node<'a> {
    /// The member `key` of an object (the last one when a key repeats); `None` for a missing
    /// key or a non-object.
    pub fn get(&self, key: &str) -> Option<&Node<'a>> {
        match self {
            Node::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|m| &m.1),
            _ => None,
        }
    }

    /// The text of a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The items of an array.
    pub fn as_array(&self) -> Option<&[Node<'a>]> {
        match self {
            Node::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The same tree owning its strings (a copy of each borrowed one), so it can outlive the
    /// text it was parsed from: what a parse on another thread hands back. Arrays and objects
    /// keep their allocations (collected in place).
    pub fn into_owned(self) -> Node<'static> {
        match self {
            Node::Null => Node::Null,
            Node::Bool(b) => Node::Bool(b),
            Node::Number(n) => Node::Number(n),
            Node::Text(s) => Node::Text(Cow::Owned(s.into_owned())),
            Node::Array(items) => Node::Array(items.into_iter().map(Node::into_owned).collect()),
            Node::Object(members) => Node::Object(
                members
                    .into_iter()
                    .map(|(k, v)| (Cow::Owned(k.into_owned()), v.into_owned()))
                    .collect(),
            ),
        }
    }
}

impl<'de> Deserialize<'de> for Node<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Node<'de>, E> {
        Ok(Node::Bool(b))
    }
    // Numbers read as `Value::as_f64` reads them.
    fn visit_i64<E>(self, n: i64) -> Result<Node<'de>, E> {
        Ok(Node::Number(n as f64))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Node<'de>, E> {
        Ok(Node::Number(n as f64))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Node<'de>, E> {
        Ok(Node::Number(n))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Node<'de>, E> {
        Ok(Node::Text(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Node<'de>, E> {
        Ok(Node::Text(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Node<'de>, E> {
        Ok(Node::Text(Cow::Owned(s)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'de>, A::Error> {
        let mut members = Vec::new();
        while let Some(key) = map.next_key::<Node<'de>>()? {
            // serde_json object keys are always strings.
            let Node::Text(key) = key else {
                return Err(serde::de::Error::custom("object key is not a string"));
            };
            members.push((key, map.next_value()?));
        }
        Ok(Node::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owned_tree_reads_as_the_borrowed_one() {
        let text = br#"{"items":[{"item_id":"a\"b","n":1.5,"ok":true,"x":null}],"k":"v"}"#.to_vec();
        let borrowed: Node<'_> = serde_json::from_slice(&text).unwrap();
        let expected = format!("{borrowed:?}");
        let owned: Node<'static> = borrowed.into_owned();
        drop(text);
        let item = &owned.get("items").and_then(Node::as_array).unwrap()[0];
        assert_eq!(item.get("item_id").and_then(Node::as_str), Some("a\"b"));
        assert!(matches!(item.get("n"), Some(Node::Number(n)) if *n == 1.5));
        assert_eq!(expected, format!("{owned:?}"));
    }
}
