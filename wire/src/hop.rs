//! The signed hop every authenticated call carries (docs/protocol.md §2).
//!
//! The signature covers canonical(`{"method","path","ts","body": M:P:TS:BODY}`), where `P`
//! keeps its query string for `/v2/` paths and is bare for `/v1/` paths, and `BODY` is the
//! exact request body text (`""` for a GET).

use super::canonical::{write_escaped, write_string};
use super::keys::SigningKey;
use super::strict_stream::{verify_stream_with, HopKey};

/// How far a hop's `x-mbx-ts` may be from the relay clock, either way (inclusive).
pub const HOP_SKEW_MS: i64 = 300_000;

/// The canonical text a hop signature covers: canonical JSON of
/// `{"body": M:P:TS:BODY, "method": M, "path": P, "ts": TS}` (see [`feed_hop_payload`]).
pub fn hop_payload(method: &str, path: &str, ts: &str, body: &str) -> String {
    let fields = method.len() + path.len() + ts.len();
    // Room for the body plus a little escaping; a body full of quotes grows the buffer once more.
    let mut out = String::with_capacity(body.len() + body.len() / 16 + 2 * fields + 64);
    feed_hop_payload(method, path, ts, body, |piece| out.push_str(piece));
    out
}

/// Body bytes escaped at a time by [`feed_hop_payload`] (at most six times this once escaped).
const FEED_CHUNK: usize = 16 * 1024;

/// Hands the text of [`hop_payload`] to `emit` in pieces, keys already in canonical order, so a
/// verifier can hash it as a stream: the body (a whole batch, up to 8 MiB) is escaped
/// [`FEED_CHUNK`] bytes at a time into one small buffer, never copied whole.
pub(crate) fn feed_hop_payload(
    method: &str,
    path: &str,
    ts: &str,
    body: &str,
    mut emit: impl FnMut(&str),
) {
    let fields = method.len() + path.len() + ts.len();
    // Room for a chunk and a little escaping (a chunk full of escapes grows it once).
    let chunk = body.len().min(FEED_CHUNK);
    let mut buf = String::with_capacity(chunk + chunk / 8 + 2 * fields + 64);
    buf.push_str("{\"body\":\"");
    for part in [method, path, ts] {
        write_escaped(&mut buf, part);
        buf.push(':');
    }
    let mut rest = body;
    while !rest.is_empty() {
        let mut end = rest.len().min(FEED_CHUNK);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, tail) = rest.split_at(end);
        write_escaped(&mut buf, piece);
        emit(&buf);
        buf.clear();
        rest = tail;
    }
    for (key, value) in [
        ("\",\"method\":", method),
        (",\"path\":", path),
        (",\"ts\":", ts),
    ] {
        buf.push_str(key);
        write_string(&mut buf, value);
    }
    buf.push('}');
    emit(&buf);
}

/// The base64 `x-mbx-sig` for a request.
pub fn sign_hop(key: &SigningKey, method: &str, path: &str, ts: &str, body: &str) -> String {
    key.sign(hop_payload(method, path, ts, body).as_bytes())
}

/// Whether `sig_b64` is `pk`'s hop signature for the request (strict verification).
pub fn verify_hop(
    pk: &[u8; 32],
    method: &str,
    path: &str,
    ts: &str,
    body: &str,
    sig_b64: &str,
) -> bool {
    HopKey::decode(pk).is_some_and(|k| verify_hop_with(&k, method, path, ts, body, sig_b64))
}

/// [`verify_hop`] with an already decoded key (the relay memoises key decoding). The payload is
/// hashed as it is escaped: memory stays the body's own, whatever the body holds.
pub fn verify_hop_with(
    key: &HopKey,
    method: &str,
    path: &str,
    ts: &str,
    body: &str,
    sig_b64: &str,
) -> bool {
    verify_stream_with(key, sig_b64, |update| {
        feed_hop_payload(method, path, ts, body, |piece| update(piece.as_bytes()));
    })
}

/// Whether `ts` is a decimal millisecond timestamp (1..=16 ASCII digits) within
/// [`HOP_SKEW_MS`] of `now_ms`.
pub fn ts_fresh(ts: &str, now_ms: i64) -> bool {
    if ts.is_empty() || ts.len() > 16 || !ts.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    match ts.parse::<i64>() {
        Ok(t) => now_ms.saturating_sub(t).saturating_abs() <= HOP_SKEW_MS,
        Err(_) => false,
    }
}

/// The `P` of the hop payload: the path with `?query` for `/v2/` paths (when the query is not
/// empty), the bare path otherwise (borrowed: no copy for the requests that carry no query).
pub fn signed_path<'a>(path: &'a str, query: Option<&str>) -> std::borrow::Cow<'a, str> {
    match query {
        Some(q) if !q.is_empty() && path.starts_with("/v2/") => format!("{path}?{q}").into(),
        _ => path.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::canonical_json;
    use serde_json::json;

    /// The original construction (format! + json! + canonical_json), kept as the reference.
    fn reference_payload(method: &str, path: &str, ts: &str, body: &str) -> String {
        let joined = format!("{method}:{path}:{ts}:{body}");
        canonical_json(&json!({"method": method, "path": path, "ts": ts, "body": joined}))
    }

    #[test]
    fn direct_payload_equals_the_canonical_json_construction() {
        let strings = crate::test_util::adversarial_strings(11, 4000);
        let mut cases: Vec<[&str; 4]> = vec![
            ["GET", "/v2/relay/items?after=0", "1", ""],
            ["", "", "", ""],
            [
                "POST",
                "/v2/relay/items",
                "1790000000000",
                "{\"items\":[\"a\\\"b\"]}",
            ],
            [
                "P\"O",
                "/p\\a\u{0}th",
                "1\n2",
                "\u{2028}\u{2029}😀\u{7f}\u{1f}",
            ],
        ];
        for w in strings.chunks_exact(4) {
            cases.push([&w[0], &w[1], &w[2], &w[3]]);
        }
        let big = format!("{{\"x\":\"{}\"}}", "\"\\é\t".repeat(5000));
        cases.push(["POST", "/v1/relay/messages", "5", &big]);
        for [m, p, t, b] in cases {
            assert_eq!(
                hop_payload(m, p, t, b),
                reference_payload(m, p, t, b),
                "{m:?} {p:?} {t:?}"
            );
        }
    }

    #[test]
    fn payload_and_signature_roundtrip() {
        let key = SigningKey::from_seed(&[3u8; 32]);
        let p = hop_payload("GET", "/v2/relay/items?after=0", "1", "");
        assert_eq!(
            p,
            "{\"body\":\"GET:/v2/relay/items?after=0:1:\",\"method\":\"GET\",\"path\":\"/v2/relay/items?after=0\",\"ts\":\"1\"}"
        );
        let sig = sign_hop(&key, "POST", "/v2/relay/ack", "5", "{\"x\":1}");
        assert!(verify_hop(
            &key.public(),
            "POST",
            "/v2/relay/ack",
            "5",
            "{\"x\":1}",
            &sig
        ));
        assert!(!verify_hop(
            &key.public(),
            "POST",
            "/v2/relay/ack",
            "6",
            "{\"x\":1}",
            &sig
        ));
        assert!(!verify_hop(
            &key.public(),
            "GET",
            "/v2/relay/ack",
            "5",
            "{\"x\":1}",
            &sig
        ));
        assert!(!verify_hop(
            &key.public(),
            "POST",
            "/v2/relay/ack",
            "5",
            "{\"x\":2}",
            &sig
        ));
        assert!(!verify_hop(
            &key.public(),
            "POST",
            "/v2/relay/ack",
            "5",
            "{\"x\":1}",
            "junk"
        ));
    }

    #[test]
    fn freshness_window_is_inclusive_and_strict_about_form() {
        let now = 1_764_427_167_000i64;
        assert!(ts_fresh("1764427167000", now));
        assert!(ts_fresh("1764427467000", now));
        assert!(ts_fresh("1764426867000", now));
        assert!(!ts_fresh("1764427467001", now));
        assert!(!ts_fresh("1764426866999", now));
        for bad in [
            "",
            "-1764427167000",
            "+1764427167000",
            " 1764427167000",
            "1764427167000.0",
            "1e12",
            "99999999999999999",
            "١٢",
        ] {
            assert!(!ts_fresh(bad, now), "{bad:?}");
        }
        assert!(!ts_fresh("9999999999999999", i64::MIN));
        assert!(ts_fresh("0", 0));
    }

    #[test]
    fn signed_path_keeps_query_only_for_v2() {
        assert_eq!(
            signed_path("/v2/relay/items", Some("after=0&limit=1")),
            "/v2/relay/items?after=0&limit=1"
        );
        assert_eq!(signed_path("/v2/relay/items", None), "/v2/relay/items");
        assert_eq!(signed_path("/v2/relay/items", Some("")), "/v2/relay/items");
        assert_eq!(
            signed_path("/v1/relay/messages", Some("after=3")),
            "/v1/relay/messages"
        );
        assert_eq!(signed_path("/v2", Some("a=1")), "/v2");
    }
}
