//! What parsing a JSON body will hold in memory beyond the body itself, known before it is
//! parsed: a body of many tiny values (`[0,0,0,...]`) costs far more than its length once parsed
//! (a value tree is ~16x such a body), so the account ([`super::account`]) is charged this
//! bound before any parse starts, and a body whose parse would not fit its share is refused
//! without being parsed. What is charged depends on how the route reads its body
//! ([`Parse`]): the tree, the string copies the parse makes, and the copies the handler keeps
//! (a push's decoded wires, a v1 push's stored envelopes).

use super::off_worker::INLINE_PARSE_MAX;

/// Bytes charged per value a body can hold: a tree node (a `serde_json::Value` and a
/// `relay_wire::json_node::Node` are 32 bytes) and the room its container's vector may hold
/// beyond it (vectors grow by doubling).
pub(crate) const PER_VALUE: u64 = 64;

/// Bytes charged per object on top of its values: the map an object becomes (a
/// `serde_json::Value` object is a B-tree whose first node takes ~630 bytes, however few its
/// members; a `Node` object's member vector starts at four members, 224 bytes).
pub(crate) const PER_OBJECT: u64 = 640;

/// What a number can grow by when a v1 envelope is written back as `JSON.stringify` writes it
/// (`1e20`, 4 bytes, is `100000000000000000000`, 21).
const NUMBER_GROWTH: u64 = 17;

/// How a route reads its body, which decides what its parse holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parse {
    /// Never parsed (the body only counts for its hop's signature).
    Unparsed,
    /// Parsed into a `serde_json::Value` before the handler: the tree and a copy of every
    /// string and key.
    Value,
    /// A v2 push: parsed into a `Node` tree borrowing the body's strings (a string with escapes
    /// is copied), or, for a body parsed off the async workers, owning a copy of each; the
    /// handler keeps each target's decoded wire (3/4 of its base64) until the commit.
    Push,
    /// A v1 push: a borrowed `Node` tree; each envelope written back as `JSON.stringify` writes
    /// it (kept until the commit: at most the body plus what numbers grow by) and read again
    /// as a `serde_json::Value` (one envelope at a time: at most the tree and one copy).
    PushV1,
}

/// What a scan of a body found, outside and inside its strings.
#[derive(Debug, Default, PartialEq, Eq)]
struct Scan {
    /// Values the body can hold: one per `,` `:` `[` `{` outside strings, plus the first.
    values: u64,
    /// Objects (`{` outside strings).
    objects: u64,
    /// Bytes inside strings (keys included).
    strings: u64,
    /// Bytes inside strings that hold an escape (a borrowed parse copies those).
    escaped: u64,
}

/// The memory parsing `body` for a route that reads it as `parse` holds beyond the body: the
/// bound charged before the parse.
pub(crate) fn parse_cost(parse: Parse, body: &[u8]) -> u64 {
    if parse == Parse::Unparsed || body.is_empty() {
        return 0;
    }
    let s = scan(body);
    let tree = s
        .values
        .saturating_mul(PER_VALUE)
        .saturating_add(s.objects.saturating_mul(PER_OBJECT));
    match parse {
        Parse::Unparsed => 0,
        Parse::Value => tree.saturating_add(s.strings),
        Parse::Push => {
            let copies = if body.len() > INLINE_PARSE_MAX {
                s.strings
            } else {
                s.escaped
            };
            tree.saturating_add(copies)
                .saturating_add(s.strings / 4 * 3)
        }
        Parse::PushV1 => {
            let written =
                (body.len() as u64).saturating_add(s.values.saturating_mul(NUMBER_GROWTH));
            // The borrowed tree and its copies, every stored envelope, and one envelope read
            // back (its tree at most the body's, its strings at most its written form).
            tree.saturating_add(s.escaped)
                .saturating_add(written)
                .saturating_add(tree)
                .saturating_add(written)
        }
    }
}

/// How deep the parser nests before it refuses the body (`serde_json`'s recursion limit): no
/// tree is built past that point, so the scan stops counting there.
const PARSE_DEPTH_LIMIT: u32 = 128;

/// One pass over `body`: tokens outside strings counted byte by byte, strings skipped with
/// `memchr` (so a body of long strings, a push's `wire_b64`, costs about one `memchr` pass),
/// up to where the parse would refuse it for its depth.
fn scan(body: &[u8]) -> Scan {
    let mut s = Scan {
        values: 1,
        ..Scan::default()
    };
    let mut depth: u32 = 0;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'[' | b'{' if depth >= PARSE_DEPTH_LIMIT => return s,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        match body[i] {
            b'"' => {
                let (end, escapes) = string_end(body, i + 1);
                let len = (end - i - 1) as u64;
                s.strings += len;
                if escapes {
                    s.escaped += len;
                }
                i = end;
            }
            b'{' => {
                s.values += 1;
                s.objects += 1;
            }
            b',' | b':' | b'[' => s.values += 1,
            _ => {}
        }
        i += 1;
    }
    s
}

/// The index of the quote that closes a string whose contents start at `from` (the body's length
/// when it never closes), and whether the string holds an escape.
fn string_end(body: &[u8], start: usize) -> (usize, bool) {
    let mut from = start;
    while let Some(q) = memchr::memchr(b'"', &body[from..]) {
        let at = from + q;
        let backslashes = body[from..at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return (at, memchr::memchr(b'\\', &body[start..at]).is_some());
        }
        from = at + 1;
    }
    (body.len(), memchr::memchr(b'\\', &body[start..]).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pad_body(values: usize) -> Vec<u8> {
        let mut junk = b"{\"items\":[{\"item_id\":0}],\"pad\":[".to_vec();
        junk.extend(std::iter::repeat_n(&b"0,"[..], values - 1).flatten());
        junk.extend_from_slice(b"0]}");
        junk
    }

    #[test]
    fn many_tiny_values_cost_far_more_than_their_length() {
        let junk = pad_body(100_001);
        let cost = parse_cost(Parse::Value, &junk);
        assert!(cost > 100_000 * PER_VALUE, "{cost}");
        // What a value tree of it really takes is below the estimate.
        let v: serde_json::Value = serde_json::from_slice(&junk).unwrap();
        assert_eq!(v["pad"].as_array().unwrap().len(), 100_001);
        assert!(cost >= 100_001 * 32);
        assert!(parse_cost(Parse::Push, &junk) >= cost - 16);
        assert_eq!(parse_cost(Parse::Unparsed, &junk), 0);
    }

    #[test]
    fn strings_cost_only_their_copies_whatever_they_hold() {
        let s = format!("{{\"wire_b64\":\"{}\"}}", "A,:[{".repeat(20_000));
        let tree = 3 * PER_VALUE + PER_OBJECT;
        assert_eq!(scan(s.as_bytes()).values, 3);
        // A value tree copies the strings; a borrowed one (small) none without escapes; a push
        // parsed off the workers copies them, and keeps the decoded wire (3/4).
        assert_eq!(parse_cost(Parse::Value, s.as_bytes()), tree + 100_008);
        assert_eq!(
            parse_cost(Parse::Push, s.as_bytes()),
            tree + 100_008 + 100_008 / 4 * 3
        );
        let small = br#"{"wire_b64":"AAAA"}"#;
        assert_eq!(
            parse_cost(Parse::Push, small),
            3 * PER_VALUE + PER_OBJECT + 12 / 4 * 3
        );
        // Escaped quotes stay inside the string; an escaped backslash ends before the quote.
        let esc = br#"{"a":"x\",[[[","b":"y\\"}"#;
        let found = scan(esc);
        assert_eq!((found.values, found.objects), (5, 1));
        assert_eq!((found.strings, found.escaped), (1 + 7 + 1 + 3, 7 + 3));
        // An unterminated string ends the scan.
        assert_eq!(scan(br#"["abc"#).values, 2);
        // Nothing past the parser's depth limit is counted (the parse stops there).
        let deep = format!("{}1{}", "{\"a\":".repeat(100_000), "}".repeat(100_000));
        let found = scan(deep.as_bytes());
        assert_eq!(found.objects, u64::from(PARSE_DEPTH_LIMIT));
        assert!(serde_json::from_str::<serde_json::Value>(&deep).is_err());
    }

    #[test]
    fn a_v1_push_is_charged_its_stored_envelopes_and_one_read_back() {
        // A number written back by `JSON.stringify` grows by up to 17 bytes.
        let body = br#"{"envelopes":[{"n":1e20}]}"#;
        let s = scan(body);
        let tree = s.values * PER_VALUE + s.objects * PER_OBJECT;
        let written = body.len() as u64 + s.values * NUMBER_GROWTH;
        assert!(written >= body.len() as u64 + 17);
        assert_eq!(parse_cost(Parse::PushV1, body), 2 * tree + 2 * written);
    }
}
