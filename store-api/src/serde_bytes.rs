//! Byte strings as one length-prefixed run (postcard's encoding of a `u8` sequence, so the bytes
//! are the same) instead of one serde call per byte: the keyspace's stored rows and the backup
//! records both use it (`#[serde(with = "relay_store::serde_bytes")]`).

use serde::{de, Deserializer, Serializer};

/// Serialize `v` as one byte run.
///
/// # Errors
/// The serializer's.
pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(v)
}

/// Read one byte run (also borrowed or owned).
///
/// # Errors
/// The deserializer's.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    struct V;
    impl<'de> de::Visitor<'de> for V {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bytes")
        }
        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
    }
    d.deserialize_byte_buf(V)
}
