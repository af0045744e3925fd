//! What parsing a JSON body will hold in memory beyond the body itself, known before it is
//! parsed: a body of many tiny values (`[0,0,0,...]`) costs far more than its length once parsed
//! (a value tree is ~16x such a body), so the account ([`super::account`]) is charged this
//! bound before any parse starts, and a body whose parse would not fit its share is refused
//! without being parsed. What is charged depends on how the route reads its body
//! ([`Parse`]): the tree, the string copies the parse makes, the copies the handler keeps
//! (a push's decoded wires, a v1 push's stored envelopes), and for a push the tree its
//! per-target wire check parses.

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
    /// handler keeps each target's decoded wire (3/4 of its base64) until the commit, and the
    /// §5 wire check parses each wire in turn (the largest wire's tree counts).
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

impl Scan {
    /// The tree a parse of the scanned bytes builds: a node per value, a map per object.
    fn tree(&self) -> u64 {
        self.values
            .saturating_mul(PER_VALUE)
            .saturating_add(self.objects.saturating_mul(PER_OBJECT))
    }
}

/// The memory parsing `body` for a route that reads it as `parse` holds beyond the body: the
/// bound charged before the parse. `max_wire` is `--max-item-bytes`: a push's wire longer than
/// that is refused before its check parses it.
pub(crate) fn parse_cost(parse: Parse, body: &[u8], max_wire: u64) -> u64 {
    if parse == Parse::Unparsed || body.is_empty() {
        return 0;
    }
    // The largest per-target wire check of a push (one target's wire parsed at a time).
    let mut wire_check = 0;
    let s = if parse == Parse::Push {
        scan_with(body, |text| {
            wire_check = wire_check.max(wire_check_cost(text, max_wire));
        })
    } else {
        scan(body)
    };
    let tree = s.tree();
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
                .saturating_add(wire_check)
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

/// Base64 characters decoded at a time by [`wire_check_cost`] (a multiple of 4).
const WIRE_CHUNK: usize = 4096;

/// What the §5 wire check of a push target holds while it parses the wire `text` names (the
/// string of its `wire_b64`): the tree and string copies of a value tree of the decoded wire
/// (an envelope's borrowed tree holds less, a receipt's value tree that). The wire is decoded a
/// chunk at a time into a buffer on the stack and scanned as it goes, so finding the bound holds
/// nothing. A string that is not base64, or whose wire is over `max_wire`, is refused before any
/// parse: 0.
fn wire_check_cost(text: &[u8], max_wire: u64) -> u64 {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    if text.is_empty() || !text.len().is_multiple_of(4) {
        return 0;
    }
    let padding = text.iter().rev().take_while(|&&b| b == b'=').count().min(2);
    let decoded = (text.len() / 4 * 3).saturating_sub(padding) as u64;
    if decoded > max_wire {
        return 0;
    }
    let mut buf = [0u8; WIRE_CHUNK / 4 * 3];
    let mut scanner = Scanner::new();
    for chunk in text.chunks(WIRE_CHUNK) {
        match STANDARD.decode_slice(chunk, &mut buf) {
            Ok(n) => scanner.feed(&buf[..n], |_| {}),
            Err(_) => return 0,
        }
        if scanner.stopped {
            break;
        }
    }
    let s = scanner.finish();
    s.tree().saturating_add(s.strings)
}

/// How deep the parser nests before it refuses the body (`serde_json`'s recursion limit): no
/// tree is built past that point, so the scan stops counting there.
const PARSE_DEPTH_LIMIT: u32 = 128;

/// One pass over `body`: tokens outside strings counted byte by byte, strings skipped with
/// `memchr` (so a body of long strings, a push's `wire_b64`, costs about one `memchr` pass),
/// up to where the parse would refuse it for its depth.
fn scan(body: &[u8]) -> Scan {
    scan_with(body, |_| {})
}

/// [`scan`], handing the contents of every string it finds to `on_string`.
fn scan_with(body: &[u8], on_string: impl FnMut(&[u8])) -> Scan {
    let mut scanner = Scanner::new();
    scanner.feed(body, on_string);
    scanner.finish()
}

/// The scan's state between the pieces of a text fed one after another (a wire decoded a chunk
/// at a time).
struct Scanner {
    found: Scan,
    depth: u32,
    /// Inside a string, and how many bytes of it so far, and whether it holds an escape.
    in_string: bool,
    string_len: u64,
    string_escaped: bool,
    /// The byte after a backslash inside a string is the next piece's first.
    escape_next: bool,
    /// Where the open string started in the current piece (none when it started in an earlier
    /// one: only strings within one piece are handed on).
    string_start: Option<usize>,
    /// The depth limit was reached: the parse stops there, and so does the count.
    stopped: bool,
}

impl Scanner {
    fn new() -> Self {
        Scanner {
            found: Scan {
                values: 1,
                ..Scan::default()
            },
            depth: 0,
            in_string: false,
            string_len: 0,
            string_escaped: false,
            escape_next: false,
            string_start: None,
            stopped: false,
        }
    }

    /// Scan the next piece of the text; `on_string` gets each string that lies within it.
    fn feed(&mut self, piece: &[u8], mut on_string: impl FnMut(&[u8])) {
        let mut i = 0;
        while i < piece.len() && !self.stopped {
            if self.in_string {
                if self.escape_next {
                    self.escape_next = false;
                    self.string_len += 1;
                    i += 1;
                    continue;
                }
                let Some(k) = memchr::memchr2(b'"', b'\\', &piece[i..]) else {
                    self.string_len += (piece.len() - i) as u64;
                    break;
                };
                let at = i + k;
                self.string_len += k as u64;
                if piece[at] == b'\\' {
                    self.string_escaped = true;
                    self.escape_next = true;
                    self.string_len += 1;
                } else {
                    self.end_string();
                    if let Some(start) = self.string_start.take() {
                        on_string(&piece[start..at]);
                    }
                }
                i = at + 1;
                continue;
            }
            match piece[i] {
                b'"' => {
                    self.in_string = true;
                    self.string_len = 0;
                    self.string_escaped = false;
                    self.string_start = Some(i + 1);
                }
                b'[' | b'{' if self.depth >= PARSE_DEPTH_LIMIT => self.stopped = true,
                b'{' => {
                    self.depth += 1;
                    self.found.values += 1;
                    self.found.objects += 1;
                }
                b'[' => {
                    self.depth += 1;
                    self.found.values += 1;
                }
                b']' | b'}' => self.depth = self.depth.saturating_sub(1),
                b',' | b':' => self.found.values += 1,
                _ => {}
            }
            i += 1;
        }
        self.string_start = None;
    }

    /// Count the string just closed.
    fn end_string(&mut self) {
        self.in_string = false;
        self.found.strings += self.string_len;
        if self.string_escaped {
            self.found.escaped += self.string_len;
        }
    }

    /// What was found; a string never closed counts up to the end.
    fn finish(mut self) -> Scan {
        if self.in_string && !self.stopped {
            self.end_string();
        }
        self.found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;

    /// `--max-item-bytes` by default.
    const MAX_WIRE: u64 = 512 * 1024;

    fn pad_body(values: usize) -> Vec<u8> {
        let mut junk = b"{\"items\":[{\"item_id\":0}],\"pad\":[".to_vec();
        junk.extend(std::iter::repeat_n(&b"0,"[..], values - 1).flatten());
        junk.extend_from_slice(b"0]}");
        junk
    }

    #[test]
    fn many_tiny_values_cost_far_more_than_their_length() {
        let junk = pad_body(100_001);
        let cost = parse_cost(Parse::Value, &junk, MAX_WIRE);
        assert!(cost > 100_000 * PER_VALUE, "{cost}");
        // What a value tree of it really takes is below the estimate.
        let v: serde_json::Value = serde_json::from_slice(&junk).unwrap();
        assert_eq!(v["pad"].as_array().unwrap().len(), 100_001);
        assert!(cost >= 100_001 * 32);
        assert!(parse_cost(Parse::Push, &junk, MAX_WIRE) >= cost - 16);
        assert_eq!(parse_cost(Parse::Unparsed, &junk, MAX_WIRE), 0);
    }

    #[test]
    fn strings_cost_only_their_copies_whatever_they_hold() {
        let s = format!("{{\"wire_b64\":\"{}\"}}", "A,:[{".repeat(20_000));
        let tree = 3 * PER_VALUE + PER_OBJECT;
        assert_eq!(scan(s.as_bytes()).values, 3);
        // A value tree copies the strings; a borrowed one (small) none without escapes; a push
        // parsed off the workers copies them, and keeps the decoded wire (3/4).
        assert_eq!(
            parse_cost(Parse::Value, s.as_bytes(), MAX_WIRE),
            tree + 100_008
        );
        assert_eq!(
            parse_cost(Parse::Push, s.as_bytes(), MAX_WIRE),
            tree + 100_008 + 100_008 / 4 * 3
        );
        // "AAAA" is a wire of three zero bytes: its check parses one value.
        let small = br#"{"wire_b64":"AAAA"}"#;
        assert_eq!(
            parse_cost(Parse::Push, small, MAX_WIRE),
            3 * PER_VALUE + PER_OBJECT + 12 / 4 * 3 + PER_VALUE
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
        assert_eq!(
            parse_cost(Parse::PushV1, body, MAX_WIRE),
            2 * tree + 2 * written
        );
    }

    /// A push body of one item whose target's wire is `wire`.
    fn push_of_wire(wire: &[u8]) -> Vec<u8> {
        format!(
            r#"{{"items":[{{"item_id":"a","kind":"envelope","targets":[{{"host_pubkey":"k","wire_b64":"{}"}}]}}]}}"#,
            STANDARD.encode(wire)
        )
        .into_bytes()
    }

    #[test]
    fn a_push_is_charged_the_tree_its_largest_wire_check_parses() {
        // A wire of tiny values: its base64 costs the body scan next to nothing, but the
        // per-target wire check parses it into a tree of 100,001 values.
        let mut wire = b"[".to_vec();
        wire.extend(std::iter::repeat_n(&b"0,"[..], 100_000).flatten());
        wire.extend_from_slice(b"0]");
        let tree: serde_json::Value = serde_json::from_slice(&wire).unwrap();
        assert_eq!(tree.as_array().unwrap().len(), 100_001);
        let body = push_of_wire(&wire);
        let cost = parse_cost(Parse::Push, &body, MAX_WIRE);
        // The body's own tree and copies, plus the wire's tree (one target at a time).
        let without_wire = scan(&body).tree() + scan(&body).strings * 7 / 4;
        assert!(without_wire < 600_000, "{without_wire}");
        assert!(cost >= 100_001 * PER_VALUE, "{cost}");
        assert!(cost >= without_wire + 100_001 * PER_VALUE, "{cost}");
        // A small wire costs its small tree.
        let small = push_of_wire(b"[0,0]");
        assert!(parse_cost(Parse::Push, &small, MAX_WIRE) < 8 * PER_OBJECT);
        // A wire over --max-item-bytes is refused before its check: no tree to charge (the
        // body's short strings that happen to be base64, `kind`'s "envelope", add a few nodes).
        let slack = 4 * PER_OBJECT;
        assert!(parse_cost(Parse::Push, &body, 1_000) < without_wire + slack);
        // Base64 that does not decode is never parsed either.
        let bad = String::from_utf8(body.clone())
            .unwrap()
            .replacen("WzAs", "W!As", 1);
        assert!(parse_cost(Parse::Push, bad.as_bytes(), MAX_WIRE) < without_wire + slack);
    }

    #[test]
    fn a_wire_decoded_in_chunks_scans_as_it_would_whole() {
        // Strings, escapes and nesting that straddle the decoder's chunk boundaries.
        let mut wire = Vec::new();
        for i in 0..3_000 {
            wire.extend_from_slice(
                format!(
                    r#"{{"k{i}":["x"y\",{{"n":[1,2]}}],"s":"{}"}},"#,
                    "z".repeat(i % 37)
                )
                .as_bytes(),
            );
        }
        let whole = scan(&wire);
        let text = STANDARD.encode(&wire);
        assert!(text.len() > 10 * WIRE_CHUNK);
        assert_eq!(
            wire_check_cost(text.as_bytes(), MAX_WIRE),
            whole.tree() + whole.strings
        );
        // Deeper than the parser goes: counted only to its limit, as the whole scan does.
        let deep = "[".repeat(10_000);
        let found = scan(deep.as_bytes());
        assert_eq!(found.values, 1 + u64::from(PARSE_DEPTH_LIMIT));
        assert_eq!(
            wire_check_cost(STANDARD.encode(&deep).as_bytes(), MAX_WIRE),
            found.tree() + found.strings
        );
    }
}
