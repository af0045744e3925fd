//! A push body's item ids read without building its tree: what the answer to a push past its
//! sender's rate needs (one `rejected:rate` result per item, echoing its id). The scan is the
//! same `serde_json` parser as a full parse (same grammar, depth limit and error texts) and
//! keeps only the ids, so a body of millions of tiny values costs one pass and no memory.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::RelayError;

/// The echoed id of each item of `body`'s `items` (the last `items` member, as a parse keeps),
/// `""` for an item that is not an object or whose `item_id` is not a string; `None` when
/// `items` is missing, not an array, or holds more than `max_batch` items.
///
/// # Errors
/// 400 `malformed JSON: ...`, as [`crate::parse_json`] answers the same body.
pub(crate) fn scan(body: &[u8], max_batch: usize) -> Result<Option<Vec<String>>, RelayError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let ids = Top { max_batch }
        .deserialize(&mut de)
        .and_then(|ids| de.end().map(|()| ids))
        .map_err(|e| RelayError::bad_request(format!("malformed JSON: {e}")))?;
    Ok(ids.filter(|ids| ids.len() <= max_batch))
}

/// The body: an object's last `items`, else nothing.
struct Top {
    max_batch: usize,
}

impl<'de> DeserializeSeed<'de> for Top {
    type Value = Option<Vec<String>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Top {
    type Value = Option<Vec<String>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut items = None;
        while let Some(is_items) = map.next_key_seed(KeyIs("items"))? {
            if is_items {
                items = map.next_value_seed(Items {
                    max_batch: self.max_batch,
                })?;
            } else {
                map.next_value::<Skip>()?;
            }
        }
        Ok(items)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// An object key: whether it is the wanted one (no copy kept).
struct KeyIs(&'static str);

impl<'de> DeserializeSeed<'de> for KeyIs {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E>(self, s: &str) -> Result<bool, E> {
        Ok(s == self.0)
    }
}

/// `items`: the ids of an array's elements (at most one past `max_batch` kept: enough to
/// refuse the batch), else nothing.
struct Items {
    max_batch: usize,
}

impl<'de> DeserializeSeed<'de> for Items {
    type Value = Option<Vec<String>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items {
    type Value = Option<Vec<String>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut ids = Vec::new();
        while ids.len() <= self.max_batch {
            match seq.next_element_seed(ItemId)? {
                Some(id) => ids.push(id),
                None => return Ok(Some(ids)),
            }
        }
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Some(ids))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// One item: its `item_id` when it is an object whose last `item_id` is a string, else `""`.
struct ItemId;

impl<'de> DeserializeSeed<'de> for ItemId {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemId {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
        let mut id = String::new();
        while let Some(is_id) = map.next_key_seed(KeyIs("item_id"))? {
            if is_id {
                id = map.next_value::<Text>()?.0;
            } else {
                map.next_value::<Skip>()?;
            }
        }
        Ok(id)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<String, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(String::new())
    }
    fn visit_bool<E>(self, _: bool) -> Result<String, E> {
        Ok(String::new())
    }
    fn visit_i64<E>(self, _: i64) -> Result<String, E> {
        Ok(String::new())
    }
    fn visit_u64<E>(self, _: u64) -> Result<String, E> {
        Ok(String::new())
    }
    fn visit_f64<E>(self, _: f64) -> Result<String, E> {
        Ok(String::new())
    }
    fn visit_str<E>(self, _: &str) -> Result<String, E> {
        Ok(String::new())
    }
    fn visit_unit<E>(self) -> Result<String, E> {
        Ok(String::new())
    }
}

/// A value read and dropped: through `deserialize_any`, as a full parse reads it (strings
/// unescaped and numbers read, so a body a parse refuses is refused here too), keeping nothing.
struct Skip;

impl<'de> serde::Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Skip, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
}

/// A value that is kept only when it is a string (`""` otherwise, read without a tree).
struct Text(String);

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
        d.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, s: &str) -> Result<Text, E> {
        Ok(Text(s.to_owned()))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Text(String::new()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Text(String::new()))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Text, E> {
        Ok(Text(String::new()))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Text, E> {
        Ok(Text(String::new()))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Text, E> {
        Ok(Text(String::new()))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Text, E> {
        Ok(Text(String::new()))
    }
    fn visit_unit<E>(self) -> Result<Text, E> {
        Ok(Text(String::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_wire::json_node::Node;

    /// What a full parse echoes for the same body (the push's own reading).
    fn parsed_ids(body: &[u8], max_batch: usize) -> Result<Option<Vec<String>>, RelayError> {
        let tree: Node<'_> = crate::parse_json_as(body)?;
        Ok(tree
            .get("items")
            .and_then(Node::as_array)
            .filter(|items| items.len() <= max_batch)
            .map(|items| {
                items
                    .iter()
                    .map(|i| {
                        i.get("item_id")
                            .and_then(Node::as_str)
                            .unwrap_or("")
                            .to_owned()
                    })
                    .collect()
            }))
    }

    #[test]
    fn the_scan_reads_a_body_exactly_as_the_parsed_push_does() {
        let bodies: &[&[u8]] = &[
            br#"{"items":[{"item_id":"a"},{"item_id":1},null,[1],{"item_id":"x","item_id":"b\"c"},{}]}"#,
            br#"{"items":[{"item_id":"a"}],"items":[{"item_id":"z"}]}"#,
            br#"{"items":{"item_id":"a"}}"#,
            br#"{"pad":[0,0,{"items":[]}],"items":[{"item_id":{"a":1}}]}"#,
            br#"[1,2]"#,
            br#""items""#,
            br#"{"items":[1,2,3,4]}"#,
            br#"{"items":[1,2,3]}"#,
            br#"{"items":[1,2,3]"#,
            br#"{"items":[1,2,3]} x"#,
            br#"{"items":[{"item_id":"\ud800"}]}"#,
            br#"{"items":[{"item_id":"a"}],"pad":"\ud800"}"#,
            br#"{"items":[{"item_id":"a"}],"pad":1e999}"#,
            br#"{"items":[{"item_id":"a","x":-1e400}]}"#,
            b"",
        ];
        for body in bodies {
            let scanned = scan(body, 3);
            let parsed = parsed_ids(body, 3);
            match (&scanned, &parsed) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", String::from_utf8_lossy(body)),
                (Err(a), Err(b)) => assert_eq!(a.body, b.body, "{}", String::from_utf8_lossy(body)),
                _ => panic!(
                    "{}: {scanned:?} vs {parsed:?}",
                    String::from_utf8_lossy(body)
                ),
            }
        }
    }

    #[test]
    fn deep_arrays_cost_no_tree_and_the_depth_limit_holds() {
        let mut pad = b"{\"items\":[{\"item_id\":\"a\"}],\"pad\":[".to_vec();
        pad.extend(std::iter::repeat_n(&b"0,"[..], 1_000_000).flatten());
        pad.extend_from_slice(b"0]}");
        assert_eq!(scan(&pad, 200).unwrap(), Some(vec!["a".to_owned()]));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(
            scan(deep.as_bytes(), 200).unwrap_err().body,
            parsed_ids(deep.as_bytes(), 200).unwrap_err().body
        );
    }
}
