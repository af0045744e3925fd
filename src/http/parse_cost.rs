//! What parsing a JSON body will cost in memory beyond the body itself, known before it is
//! parsed: [`PER_VALUE`] for every value it can hold (plus the body's length again where the
//! parse copies its strings). A body of many tiny values (`[0,0,0,...]`)
//! costs far more than its length once parsed (a value tree is ~16x such a body), so the
//! account ([`super::account`]) is charged this estimate before any parse starts, and a body whose
//! tree would not fit its share is refused without being parsed.

/// Bytes charged per value a body can hold: a tree node (a `serde_json::Value` is 32 bytes) and
/// the room its container's vector may hold beyond it (vectors grow by doubling).
pub(crate) const PER_VALUE: u64 = 64;

/// The memory a tree of `body` may take besides its strings: [`PER_VALUE`] per structural token
/// outside strings (`,` `:` `[` `{`: each value is announced by one of them, or is the first).
/// Strings are skipped with `memchr`, so a body of long strings (a push's `wire_b64`) costs
/// about one pass of `memchr` over it.
pub(crate) fn tree_cost(body: &[u8]) -> u64 {
    let mut tokens: u64 = 1;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => i = string_end(body, i + 1),
            b',' | b':' | b'[' | b'{' => tokens += 1,
            _ => {}
        }
        i += 1;
    }
    tokens.saturating_mul(PER_VALUE)
}

/// The index of the quote that closes a string whose contents start at `from` (the body's length
/// when it never closes).
fn string_end(body: &[u8], mut from: usize) -> usize {
    while let Some(q) = memchr::memchr(b'"', &body[from..]) {
        let at = from + q;
        let backslashes = body[from..at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return at;
        }
        from = at + 1;
    }
    body.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_tiny_values_cost_far_more_than_their_length() {
        let mut junk = b"{\"items\":[{\"item_id\":0}],\"pad\":[".to_vec();
        junk.extend(std::iter::repeat_n(&b"0,"[..], 100_000).flatten());
        junk.extend_from_slice(b"0]}");
        let cost = tree_cost(&junk);
        assert!(cost > 100_000 * PER_VALUE, "{cost}");
        // What a value tree of it really takes is below the estimate.
        let v: serde_json::Value = serde_json::from_slice(&junk).unwrap();
        assert_eq!(v["pad"].as_array().unwrap().len(), 100_001);
        assert!(cost >= 100_001 * 32);
    }

    #[test]
    fn strings_cost_nothing_whatever_they_hold() {
        let s = format!("{{\"wire_b64\":\"{}\"}}", "A,:[{".repeat(20_000));
        assert_eq!(tree_cost(s.as_bytes()), 3 * PER_VALUE);
        // Escaped quotes stay inside the string; an escaped backslash ends before the quote.
        let esc = br#"{"a":"x\",[[[","b":"y\\"}"#;
        assert_eq!(tree_cost(esc), 5 * PER_VALUE);
        // An unterminated string ends the scan.
        assert_eq!(tree_cost(br#"["abc"#), 2 * PER_VALUE);
    }
}
