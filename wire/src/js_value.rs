//! JavaScript's reading of JSON where the agentmbx reference relay relies on it and hosts see the
//! result (docs/protocol.md §3 "Pull", "Legacy v1 mail"): `Number(x)` for the lenient numeric
//! fields (`after`, `limit`, a v1 ack's `cursor`), and `JSON.stringify(JSON.parse(text))` for
//! the bytes a v1 envelope is stored as (the sender's key order, not canonical JSON).

use std::collections::HashMap;

use serde_json::Value;

use super::canonical::{js_number, write_string};
use super::json_node::Node;

/// `Number(s)` for a string: surrounding JavaScript white space trimmed; empty is 0; a decimal
/// literal (optional sign, digits with an optional fraction, or a fraction alone, optional
/// exponent) or `Infinity` with an optional sign; `0x`/`0o`/`0b` integers without a sign;
/// anything else is NaN (`"1_000"`, `"12abc"`, `"inf"`, `"."`).
pub fn string_to_number(s: &str) -> f64 {
    let t = s.trim_matches(is_js_space);
    if t.is_empty() {
        return 0.0;
    }
    if let Some(n) = radix_integer(t) {
        return n;
    }
    let (negative, body) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let magnitude = if body == "Infinity" {
        f64::INFINITY
    } else if is_decimal_literal(body) {
        // The grammar is checked above: Rust reads exactly these forms, correctly rounded.
        body.parse::<f64>().unwrap_or(f64::NAN)
    } else {
        return f64::NAN;
    };
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// `Number(v)` for a JSON value: `null` 0, booleans 0 and 1, a string as
/// [`string_to_number`], an array through its text (`[7]` is 7, `[]` 0, `[1,2]` NaN), an
/// object NaN.
pub fn to_number(v: &Value) -> f64 {
    match v {
        Value::Null | Value::Bool(false) => 0.0,
        Value::Bool(true) => 1.0,
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::String(s) => string_to_number(s),
        Value::Array(_) => string_to_number(&to_js_string(v)),
        Value::Object(_) => f64::NAN,
    }
}

/// `String(v)` as JavaScript converts a parsed JSON value (arrays joined by `,`, `null` inside
/// an array as empty text, objects `[object Object]`).
fn to_js_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => js_number(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|i| match i {
                    Value::Null => String::new(),
                    _ => to_js_string(i),
                })
                .collect();
            parts.join(",")
        }
        Value::Object(_) => "[object Object]".into(),
    }
}

/// JavaScript's `WhiteSpace` and `LineTerminator` code points (what `Number` trims).
fn is_js_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200a}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}'
                | '\u{feff}'
    )
}

/// `0x1F`, `0o17`, `0b101` (no sign): their value; `None` for any other text.
fn radix_integer(t: &str) -> Option<f64> {
    let b = t.as_bytes();
    if b.len() < 2 || b[0] != b'0' {
        return None;
    }
    let radix = match b[1] {
        b'x' | b'X' => 16,
        b'o' | b'O' => 8,
        b'b' | b'B' => 2,
        _ => return None,
    };
    let digits = &t[2..];
    if digits.is_empty() {
        return Some(f64::NAN);
    }
    let mut n = 0.0f64;
    for c in digits.chars() {
        match c.to_digit(radix) {
            Some(d) => n = n * f64::from(radix) + f64::from(d),
            None => return Some(f64::NAN),
        }
    }
    Some(n)
}

/// An unsigned `StrUnsignedDecimalLiteral` without `Infinity`: `1`, `1.`, `.5`, `1.5e-3`.
fn is_decimal_literal(s: &str) -> bool {
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = all_digits(int) && all_digits(frac) && !(int.is_empty() && frac.is_empty());
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && all_digits(e)
    });
    mantissa_ok && exponent_ok
}

/// `JSON.stringify` of what `JSON.parse` makes of the JSON text `node` was read from: no white
/// space; a repeated key keeps its first place and its last value; array-index keys (`"0"` to
/// `"4294967294"`, no leading zero) first in numeric order, then the other keys in the order
/// sent; numbers as `Number#toString` prints them; strings escaped as `JSON.stringify` does.
pub fn stringify_parsed(node: &Node<'_>) -> String {
    let mut out = String::new();
    write_node(&mut out, node);
    out
}

fn write_node(out: &mut String, node: &Node<'_>) {
    match node {
        Node::Null => out.push_str("null"),
        Node::Bool(true) => out.push_str("true"),
        Node::Bool(false) => out.push_str("false"),
        // serde_json never yields a non-finite number; JSON.stringify would print null.
        Node::Number(x) if x.is_finite() => out.push_str(&js_number(*x)),
        Node::Number(_) => out.push_str("null"),
        Node::Text(s) => write_string(out, s),
        Node::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_node(out, item);
            }
            out.push(']');
        }
        Node::Object(members) => write_object(out, members),
    }
}

fn write_object(out: &mut String, members: &[(std::borrow::Cow<'_, str>, Node<'_>)]) {
    // Each key once, at its first place, with its last value (as `JSON.parse` assigns).
    let mut place: HashMap<&str, usize> = HashMap::with_capacity(members.len());
    let mut keys: Vec<(&str, &Node<'_>)> = Vec::with_capacity(members.len());
    for (k, v) in members {
        match place.get(k.as_ref()) {
            Some(&i) => keys[i].1 = v,
            None => {
                place.insert(k, keys.len());
                keys.push((k, v));
            }
        }
    }
    // Array indices first, ascending; the sort is stable, so the rest keep their order.
    keys.sort_by_key(|(k, _)| array_index(k).map_or((1, 0), |i| (0, i)));
    out.push('{');
    for (i, (k, v)) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, k);
        out.push(':');
        write_node(out, v);
    }
    out.push('}');
}

/// The index a key names when it is an array index (`0` to `2^32 − 2`, written without a
/// leading zero or sign): JavaScript lists such keys of an object first.
fn array_index(k: &str) -> Option<u32> {
    let b = k.as_bytes();
    if b.is_empty()
        || b.len() > 10
        || !b.iter().all(u8::is_ascii_digit)
        || (b[0] == b'0' && b.len() > 1)
    {
        return None;
    }
    k.parse::<u64>()
        .ok()
        .filter(|n| *n <= 4_294_967_294)
        .and_then(|n| u32::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each case against what Node.js 20 printed for `Number(s)`.
    #[test]
    fn strings_read_as_javascript_number_reads_them() {
        let nan = f64::NAN;
        let cases: &[(&str, f64)] = &[
            ("", 0.0),
            (" 12 ", 12.0),
            ("1.", 1.0),
            (".5", 0.5),
            (".", nan),
            ("e5", nan),
            ("1e5", 100_000.0),
            ("+7", 7.0),
            ("-0", -0.0),
            ("0x1F", 31.0),
            ("0X1f", 31.0),
            ("-0x1", nan),
            ("0o17", 15.0),
            ("0b101", 5.0),
            ("0x", nan),
            ("Infinity", f64::INFINITY),
            ("-Infinity", f64::NEG_INFINITY),
            ("+Infinity", f64::INFINITY),
            ("infinity", nan),
            ("inf", nan),
            ("NaN", nan),
            ("1_000", nan),
            ("12abc", nan),
            ("\u{a0}12\u{feff}", 12.0),
            ("1e", nan),
            ("00012", 12.0),
            ("0.0000001", 1e-7),
            ("1e400", f64::INFINITY),
            ("+.5", 0.5),
            ("-.5e1", -5.0),
            ("1e+5", 100_000.0),
            ("1E-5", 0.00001),
            ("1.9", 1.9),
            ("1795963620919.5", 1_795_963_620_919.5),
        ];
        for (s, want) in cases {
            let got = string_to_number(s);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "Number({s:?}) = {got}, want {want}"
            );
        }
    }

    /// Each case against what Node.js 20 printed for `Number(v)`.
    #[test]
    fn json_values_read_as_javascript_number_reads_them() {
        let cases = [
            (json!(null), 0.0),
            (json!(true), 1.0),
            (json!(false), 0.0),
            (json!([]), 0.0),
            (json!([7]), 7.0),
            (json!([[7]]), 7.0),
            (json!([1, 2]), f64::NAN),
            (json!([null]), 0.0),
            (json!({}), f64::NAN),
            (json!(["0x10"]), 16.0),
            (json!([" 5 "]), 5.0),
            (json!("5"), 5.0),
            (json!([true]), f64::NAN),
            (json!([[]]), 0.0),
            (json!([1.5e300]), 1.5e300),
            (json!(12.75), 12.75),
        ];
        for (v, want) in cases {
            let got = to_number(&v);
            assert!(
                got == want || (got.is_nan() && want.is_nan()),
                "Number({v}) = {got}, want {want}"
            );
        }
    }

    /// The expected text is what Node.js 20 printed for `JSON.stringify(JSON.parse(text))`.
    #[test]
    fn stringify_of_a_parse_is_what_javascript_prints() {
        let text = r#"{"b":1,"4294967295":2,"4294967294":3,"10":4,"9":5,"01":6,"-1":7,"1.5":8,"a":9,"b":10,"__proto__":{"x":1}, "n":[1.0, -0, 1e21, 1E-7, 123456789012345678901234567890, 0.1], "s":"\u00e9\u2028\/\u0001", "0":{"z":1,"2":2,"1":1}}"#;
        let want = "{\"0\":{\"1\":1,\"2\":2,\"z\":1},\"9\":5,\"10\":4,\"4294967294\":3,\"b\":10,\"4294967295\":2,\"01\":6,\"-1\":7,\"1.5\":8,\"a\":9,\"__proto__\":{\"x\":1},\"n\":[1,0,1e+21,1e-7,1.2345678901234568e+29,0.1],\"s\":\"é\u{2028}/\\u0001\"}";
        let node: Node<'_> = serde_json::from_str(text).unwrap();
        assert_eq!(stringify_parsed(&node), want);
    }

    /// Text a JavaScript host sent (`JSON.stringify` output) comes back byte for byte: keys
    /// in the sender's order, not sorted.
    #[test]
    fn javascript_output_is_kept_as_sent() {
        for text in [
            r#"{"v":3,"id":"X","enc":{"v":1,"body":"b"},"to":["a@b"],"meta":{"tags":[],"hop":0},"ok":true,"no":false,"z":null}"#,
            r#"[{"z":1,"a":[{"y":"\"q\"","b":"\\"}]}]"#,
        ] {
            let node: Node<'_> = serde_json::from_str(text).unwrap();
            assert_eq!(stringify_parsed(&node), text);
        }
    }

    #[test]
    fn array_indices_are_the_javascript_ones() {
        assert_eq!(array_index("0"), Some(0));
        assert_eq!(array_index("4294967294"), Some(4_294_967_294));
        for k in [
            "",
            "4294967295",
            "01",
            "-1",
            "1.5",
            "+1",
            " 1",
            "99999999999",
        ] {
            assert_eq!(array_index(k), None, "{k:?}");
        }
    }
}
