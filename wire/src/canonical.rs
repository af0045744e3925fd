//! Canonical JSON: the exact bytes every signature in the protocol covers.
//!
//! It must equal what the agentmbx reference produces with JavaScript `JSON.stringify` over an
//! object whose keys were sorted, so the rules below mirror JavaScript, not Rust:
//! - object keys sorted by UTF-16 code unit (so `"😀"` (D83D..) sorts before `"\u{E000}"`);
//! - strings escaped like `JSON.stringify`: `\"`, `\\`, `\b \f \n \r \t`, other U+0000..U+001F as
//!   lowercase `\u00xx`, everything else (including U+007F, U+2028, `/`) left as raw UTF-8;
//! - every number is treated as an IEEE double and printed like `Number#toString`.
//!
//! Keys are ordered purely by code unit, as docs/protocol.md states (the reference serialises
//! sorted keys itself); a JavaScript object rebuilt in sorted order would instead list
//! array-index keys ("9", "10") first in numeric order. No signed protocol record has such keys.
//!
//! Recursion depth is bounded by the parser: `serde_json` refuses input nested deeper than 128.

use serde_json::Value;
use std::cmp::Ordering;
use std::fmt::Write as _;

/// The canonical text of `v` (see the module doc).
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

/// The UTF-8 bytes of [`canonical_json`]; what signatures are computed over.
pub fn canonical_bytes(v: &Value) -> Vec<u8> {
    canonical_json(v).into_bytes()
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => match n.as_f64() {
            // JSON.stringify prints non-finite numbers as null; serde_json never yields them,
            // but a number it cannot represent as f64 is treated the same way.
            Some(x) if x.is_finite() => out.push_str(&js_number(x)),
            _ => out.push_str("null"),
        },
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| cmp_utf16(a.0, b.0));
            out.push('{');
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, val);
            }
            out.push('}');
        }
    }
}

/// Orders strings the way JavaScript's default sort does: by UTF-16 code unit.
pub(crate) fn cmp_utf16(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Appends `s` as a JSON string literal escaped exactly like `JSON.stringify`.
pub fn write_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    write_escaped(out, s);
    out.push('"');
}

/// Whether JSON.stringify escapes byte `b`: `"`, `\` and U+0000..U+001F, all ASCII, so a
/// byte scan never splits a UTF-8 sequence.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether any of the 8 bytes packed in `w` [`needs_escape`] (exact, branch-free bit tricks:
/// "has a byte below 0x20" and "has a zero byte" after xor with the quote and the backslash).
fn word_needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w;
    let q = w ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q;
    let bs = w ^ (ONES * u64::from(b'\\'));
    let backslash = bs.wrapping_sub(ONES) & !bs;
    (below_space | quote | backslash) & HIGH != 0
}

/// Appends the escaped contents of `s` (no quotes). Clean 8-byte words are skipped whole and
/// runs without escapes are copied in one piece: a hop payload holds the whole request body,
/// and the char-by-char form was 7% of a batch push.
pub(crate) fn write_escaped(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let word = bytes
            .get(i..i + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok());
        let end = match word {
            Some(w) if !word_needs_escape(u64::from_le_bytes(w)) => {
                i += 8;
                continue;
            }
            Some(_) => i + 8,
            None => bytes.len(),
        };
        for (j, &b) in bytes.iter().enumerate().take(end).skip(i) {
            if !needs_escape(b) {
                continue;
            }
            // Escaped bytes are ASCII, so `j` is always a char boundary.
            out.push_str(&s[start..j]);
            out.push_str(escape_of(b));
            start = j + 1;
        }
        i = end;
    }
    out.push_str(&s[start..]);
}

/// The `JSON.stringify` escape of a byte that [`needs_escape`]: `\"`, `\\`, the five short
/// control escapes, else lowercase `\u00xx`.
fn escape_of(b: u8) -> &'static str {
    const CONTROL: [&str; 32] = [
        "\\u0000", "\\u0001", "\\u0002", "\\u0003", "\\u0004", "\\u0005", "\\u0006", "\\u0007",
        "\\b", "\\t", "\\n", "\\u000b", "\\f", "\\r", "\\u000e", "\\u000f", "\\u0010", "\\u0011",
        "\\u0012", "\\u0013", "\\u0014", "\\u0015", "\\u0016", "\\u0017", "\\u0018", "\\u0019",
        "\\u001a", "\\u001b", "\\u001c", "\\u001d", "\\u001e", "\\u001f",
    ];
    match b {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        _ => CONTROL.get(usize::from(b)).copied().unwrap_or(""),
    }
}

/// Splits Rust's `{:e}` text (`d[.ddd]e[-]N`) into its digit string and decimal exponent.
fn sci_parts(sci: &str) -> (String, i64) {
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let digits = mantissa.chars().filter(char::is_ascii_digit).collect();
    (digits, exp.parse().unwrap_or(0))
}

/// The shortest round-trip decimal digits of a finite positive `x` and their exponent
/// (`x ≈ d.ddd × 10^exp`), with ECMAScript's tie rule: when two shortest candidates are
/// equally close to `x`, the even one. Rust's shortest formatting resolves such exact ties
/// upward (`8800014503606.8125` → `…6.813`), V8 to even (`…6.812`), so ties are detected from
/// the exact decimal expansion and corrected.
fn shortest_digits(x: f64) -> (String, i64) {
    let (digits, exp) = sci_parts(&format!("{x:e}"));
    // Integers below 2^53 have no ties: a neighbour candidate would be ≥ 5 away (ulp ≤ 1).
    if x.fract() == 0.0 && x < 9_007_199_254_740_992.0 {
        return (digits, exp);
    }
    // 800 fractional digits hold the exact expansion of any f64 (at most 767 significant).
    let (exact, exact_exp) = sci_parts(&format!("{x:.800e}"));
    let k = digits.len();
    let tail = exact.get(k..).unwrap_or("");
    let is_tie = exact_exp == exp
        && tail.starts_with('5')
        && tail
            .get(1..)
            .is_some_and(|rest| rest.bytes().all(|b| b == b'0'));
    let last = digits.bytes().last().unwrap_or(b'0');
    if !is_tie || (last - b'0') & 1 == 0 {
        return (digits, exp);
    }
    // `digits` is either the truncation of `exact` (then the other candidate is +1) or the
    // rounded-up one (then −1); the other one ends in an even digit.
    let truncated = exact.get(..k).unwrap_or("") == digits;
    let other_last = if truncated { last + 1 } else { last - 1 };
    if other_last > b'9' {
        return (digits, exp);
    }
    let mut other = digits.clone().into_bytes();
    if let Some(l) = other.last_mut() {
        *l = other_last;
    }
    let other = String::from_utf8(other).unwrap_or_default();
    let (first, rest) = other.split_at(1.min(other.len()));
    let roundtrips = format!("{first}.{rest}e{exp}").parse::<f64>() == Ok(x);
    if roundtrips {
        (other.trim_end_matches('0').to_string(), exp)
    } else {
        (digits, exp)
    }
}

/// `x` printed like JavaScript `Number.prototype.toString()` (radix 10).
///
/// Uses the shortest round-trip digits ([`shortest_digits`]) and then the ECMAScript
/// Number::toString layout rules: plain digits while the decimal exponent is within 21,
/// `0.000001`-style down to 1e-7, otherwise `d.ddde+N` / `de-N`. `-0` prints as `0`.
pub fn js_number(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    if x == 0.0 {
        return "0".to_string();
    }
    // Integers below 2^53 (seqs, counts, versions) print as their plain digits.
    if x.fract() == 0.0 && x.abs() < 9_007_199_254_740_992.0 {
        return (x as i64).to_string();
    }
    let mut out = String::new();
    if x < 0.0 {
        out.push('-');
    }
    let (digits, e) = shortest_digits(x.abs());
    let k = digits.len() as i64;
    // ECMAScript's n: value = 0.s * 10^n, i.e. s * 10^(n-k).
    let n = e + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        for _ in 0..(n - k) {
            out.push('0');
        }
    } else if 0 < n && n <= 21 {
        let (int_part, frac_part) = digits.split_at(n as usize);
        out.push_str(int_part);
        out.push('.');
        out.push_str(frac_part);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        for _ in 0..(-n) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let e = n - 1;
        let (first, rest) = digits.split_at(1.min(digits.len()));
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        let _ = write!(out, "{}", e.abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::adversarial_strings;
    use serde_json::json;

    fn canon(text: &str) -> String {
        canonical_json(&serde_json::from_str(text).expect("test input is JSON"))
    }

    #[test]
    fn numbers_print_like_javascript() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (1.5, "1.5"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (0.000001, "0.000001"),
            (0.0000001, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (-2.5e-10, "-2.5e-10"),
            (1e21, "1e+21"),
            (1.2345e21, "1.2345e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (9007199254740991.0, "9007199254740991"),
            (9007199254740992.0, "9007199254740992"),
            (-9007199254740991.0, "-9007199254740991"),
            (1795963620919.0, "1795963620919"),
            (123.456, "123.456"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (0.1 + 0.2, "0.30000000000000004"),
            (100.0, "100"),
            (1234.5678e10, "12345678000000"),
            // exact ties between two shortest candidates resolve to the even digit, like V8
            (8_800_014_503_606.0 + 0.8125, "8800014503606.812"),
            (-(142_824_365_923_326.0 + 0.625), "-142824365923326.62"),
            (2_067_776_186_925_270.0 + 0.25, "2067776186925270.2"),
            (0.5, "0.5"),
            (2.5, "2.5"),
        ];
        for (x, want) in cases {
            assert_eq!(js_number(*x), *want, "js_number({x:e})");
        }
        assert_eq!(js_number(f64::NAN), "NaN");
        // the integer fast path agrees with the general digits-and-layout path around 2^53
        for x in [
            1.0f64,
            -7.0,
            9_007_199_254_740_991.0,
            -9_007_199_254_740_991.0,
            4_503_599_627_370_497.0,
        ] {
            let (digits, e) = shortest_digits(x.abs());
            let zeros = "0".repeat(usize::try_from(e + 1).unwrap_or(0) - digits.len());
            let sign = if x < 0.0 { "-" } else { "" };
            assert_eq!(js_number(x), format!("{sign}{digits}{zeros}"));
        }
        assert_eq!(js_number(f64::INFINITY), "Infinity");
    }

    #[test]
    fn numbers_from_json_text() {
        assert_eq!(
            canon("[1.0, 1e3, -0.0, 2E-7, 12.50, 1e21, 18446744073709551615]"),
            "[1,1000,0,2e-7,12.5,1e+21,18446744073709552000]"
        );
        assert_eq!(
            canon("[-9223372036854775808, 4294967296]"),
            "[-9223372036854776000,4294967296]"
        );
    }

    #[test]
    fn floats_parse_correctly_rounded_like_json_parse() {
        // Needs serde_json's `float_roundtrip` feature: the default fast path misrounds these.
        for text in [
            "-9.074441513367783e-210",
            "2.2250738585072014e-308",
            "0.1234567890123456789",
        ] {
            let v: Value = serde_json::from_str(text).expect("number");
            let want = text.parse::<f64>().expect("f64");
            assert_eq!(v.as_f64(), Some(want), "{text}");
            assert_eq!(canonical_json(&v), js_number(want));
        }
        assert_eq!(
            canon("[-9.074441513367783e-210]"),
            "[-9.074441513367783e-210]"
        );
    }

    /// The original char-by-char escaper, kept as the reference for [`write_escaped`].
    fn reference_string(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    #[test]
    fn word_test_agrees_with_the_byte_test() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let interesting = [
            0u8, 0x1f, 0x20, 0x21, b'"', b'\\', 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff,
        ];
        for n in 0..200_000 {
            let w: [u8; 8] = std::array::from_fn(|_| {
                if n % 2 == 0 {
                    interesting[rng.gen_range(0..interesting.len())]
                } else {
                    rng.gen()
                }
            });
            assert_eq!(
                word_needs_escape(u64::from_le_bytes(w)),
                w.iter().any(|b| needs_escape(*b)),
                "{w:?}"
            );
        }
    }

    #[test]
    fn run_copying_escaper_matches_the_char_by_char_reference() {
        let mut cases = adversarial_strings(7, 5000);
        cases.extend((0u8..0x80).map(|b| char::from(b).to_string()));
        cases.push(String::new());
        cases.push("\"\\\u{0}\u{1f}".repeat(3));
        for s in cases {
            let mut out = String::new();
            write_string(&mut out, &s);
            assert_eq!(out, reference_string(&s), "{s:?}");
        }
    }

    #[test]
    fn strings_escape_like_json_stringify() {
        let v = json!("\u{0}\u{1}\u{8}\u{9}\u{a}\u{b}\u{c}\u{d}\u{1f}\u{20}\u{7f}\"\\/\u{2028}é😀");
        assert_eq!(
            canonical_json(&v),
            "\"\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f \u{7f}\\\"\\\\/\u{2028}é😀\""
        );
    }

    #[test]
    fn keys_sort_by_utf16_code_unit_at_every_level() {
        assert_eq!(
            canon(r#"{"b":{"z":1,"a":[{"y":2,"x":3}]},"a":null,"\ue000":1,"😀":2,"B":true}"#),
            "{\"B\":true,\"a\":null,\"b\":{\"a\":[{\"x\":3,\"y\":2}],\"z\":1},\"😀\":2,\"\u{e000}\":1}"
        );
        assert_eq!(cmp_utf16("😀", "\u{e000}"), Ordering::Less);
        assert_eq!(cmp_utf16("a", "ab"), Ordering::Less);
        assert_eq!(cmp_utf16("", ""), Ordering::Equal);
    }

    #[test]
    fn keys_are_escaped_too_and_output_has_no_whitespace() {
        assert_eq!(
            canon("{ \"a\\nb\" : [ 1 , { } , [ ] ] }"),
            "{\"a\\nb\":[1,{},[]]}"
        );
        assert_eq!(
            canonical_bytes(&json!({"k": "é"})),
            "{\"k\":\"é\"}".as_bytes()
        );
    }

    #[test]
    fn deep_nesting_is_bounded_by_the_parser() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(serde_json::from_str::<Value>(&deep).is_err());
        let ok = "[".repeat(100) + &"]".repeat(100);
        assert_eq!(canon(&ok), ok);
    }
}
