//! Time formats of the protocol.
//!
//! - [`iso_ms`] prints like JavaScript `Date#toISOString` (`2026-11-29T14:39:27.123Z`).
//! - [`parse_iso_strict`] reads the UTC datetime form signed records carry (`iat`, receipt `at`):
//!   `YYYY-MM-DDTHH:mm:ss[.fraction]Z` with real calendar ranges; fraction digits beyond
//!   milliseconds are truncated. Dates alone, offsets and missing seconds are refused.
//! - [`parse_utc_instant`] is that form with at most three fraction digits (an envelope's
//!   `meta.external_since`, agentmbx T344).
//! - [`parse_date_loose`] accepts what `Date.parse` in Node accepts in practice for an envelope
//!   `ts`: the ISO forms (year / year-month / date, with optional time, seconds, fraction and `Z`
//!   or `±HH:mm` offset; `T` or a space as separator), and the `toUTCString` / `toString` /
//!   RFC 2822 forms (`Sun, 29 Nov 2026 14:00:00 GMT`, `Sun Nov 29 2026 14:00:00 GMT+0000`),
//!   and the slash forms `2026/11/29` and `11/29/2026` (optionally with time and zone).
//!   A date-time without an offset is read as UTC (the relay runs on UTC). Like V8, an
//!   out-of-range day within 1..=31 rolls over into the next month.
//!
//! Everything works on ASCII bytes; any non-ASCII input is simply refused.

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;
/// JavaScript's Date range: ±8.64e15 ms around the epoch.
const JS_DATE_LIMIT_MS: i64 = 8_640_000_000_000_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1..=12, day may exceed the month:
/// it then counts on into the following month, like V8).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `ms` since the epoch as `toISOString` prints it. Years past 9999 use the expanded
/// `+YYYYYY` form, as JavaScript does.
pub fn iso_ms(ms: u64) -> String {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    let days = ms.div_euclid(DAY_MS);
    let rem = ms.rem_euclid(DAY_MS);
    let (y, mo, d) = civil_from_days(days);
    let year = if (0..=9999).contains(&y) {
        format!("{y:04}")
    } else {
        format!("+{y:06}")
    };
    format!(
        "{year}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// A small cursor over ASCII bytes.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a str) -> Self {
        Cursor {
            b: s.as_bytes(),
            i: 0,
        }
    }
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn done(&self) -> bool {
        self.i >= self.b.len()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    /// Exactly `n` digits.
    fn digits(&mut self, n: usize) -> Option<i64> {
        let mut v = 0i64;
        for _ in 0..n {
            let c = self.peek().filter(u8::is_ascii_digit)?;
            v = v * 10 + i64::from(c - b'0');
            self.i += 1;
        }
        Some(v)
    }
    /// One or more digits (at most `max`), returning the value and the count.
    fn digit_run(&mut self, max: usize) -> Option<(i64, usize)> {
        let start = self.i;
        let mut v = 0i64;
        while let Some(c) = self.peek().filter(u8::is_ascii_digit) {
            if self.i - start >= max {
                return None;
            }
            v = v * 10 + i64::from(c - b'0');
            self.i += 1;
        }
        (self.i > start).then_some((v, self.i - start))
    }
    /// A fraction after '.': milliseconds from the first three digits, the rest ignored.
    fn fraction_ms(&mut self) -> Option<i64> {
        let mut ms = 0i64;
        let mut count = 0usize;
        while let Some(c) = self.peek().filter(u8::is_ascii_digit) {
            if count < 3 {
                ms = ms * 10 + i64::from(c - b'0');
            }
            count += 1;
            self.i += 1;
        }
        if count == 0 {
            return None;
        }
        for _ in count..3 {
            ms *= 10;
        }
        Some(ms)
    }
}

/// Milliseconds of a validated date and time, or `None` when outside the JavaScript Date range.
fn compose(year: i64, month: i64, day: i64, h: i64, mi: i64, s: i64, ms: i64) -> Option<i64> {
    let t = days_from_civil(year, month, day)
        .checked_mul(DAY_MS)?
        .checked_add(h * 3_600_000 + mi * 60_000 + s * 1000 + ms)?;
    (t.abs() <= JS_DATE_LIMIT_MS).then_some(t)
}

/// The strict UTC datetime form (see module doc): milliseconds since the epoch, non-negative.
pub fn parse_iso_strict(s: &str) -> Option<u64> {
    u64::try_from(parse_utc_fields(s, usize::MAX)?).ok()
}

/// An envelope's `meta.external_since` (docs/protocol.md §5, agentmbx T344): exactly
/// `^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,3})?Z$` and a real date and time (month 1-12, the
/// month's days with leap years, hour 0-23, minute and second 0-59); milliseconds since the
/// epoch (negative before 1970).
pub fn parse_utc_instant(s: &str) -> Option<i64> {
    parse_utc_fields(s, 3)
}

/// `YYYY-MM-DDTHH:mm:ss[.fraction]Z` with real calendar ranges and at most `max_fraction`
/// fraction digits (beyond milliseconds they are truncated).
fn parse_utc_fields(s: &str, max_fraction: usize) -> Option<i64> {
    let mut c = Cursor::new(s);
    let year = c.digits(4)?;
    (c.eat(b'-')).then_some(())?;
    let month = c.digits(2)?;
    (c.eat(b'-')).then_some(())?;
    let day = c.digits(2)?;
    (c.eat(b'T')).then_some(())?;
    let h = c.digits(2)?;
    (c.eat(b':')).then_some(())?;
    let mi = c.digits(2)?;
    (c.eat(b':')).then_some(())?;
    let sec = c.digits(2)?;
    let ms = if c.eat(b'.') {
        let start = c.i;
        let ms = c.fraction_ms()?;
        (c.i - start <= max_fraction).then_some(ms)?
    } else {
        0
    };
    (c.eat(b'Z') && c.done()).then_some(())?;
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || h > 23
        || mi > 59
        || sec > 59
    {
        return None;
    }
    compose(year, month, day, h, mi, sec, ms)
}

/// What `Date.parse` accepts in practice (see module doc); milliseconds since the epoch.
pub fn parse_date_loose(s: &str) -> Option<i64> {
    let s = s.trim_matches(|c: char| c.is_ascii_whitespace());
    if !s.is_ascii() || s.is_empty() || s.len() > 200 {
        return None;
    }
    parse_iso_loose(s).or_else(|| parse_legacy(s))
}

/// ECMAScript date-time string format, plus the space separator and `±HHmm` offsets.
fn parse_iso_loose(s: &str) -> Option<i64> {
    let mut c = Cursor::new(s);
    let year = match c.peek()? {
        b'+' | b'-' => {
            let neg = c.eat(b'-');
            if !neg {
                c.eat(b'+');
            }
            let y = c.digits(6)?;
            if neg && y == 0 {
                return None; // -000000 is not allowed
            }
            if neg {
                -y
            } else {
                y
            }
        }
        _ => c.digits(4)?,
    };
    let (mut month, mut day) = (1, 1);
    if c.eat(b'-') {
        month = c.digits(2)?;
        if c.eat(b'-') {
            day = c.digits(2)?;
        }
    }
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    if c.done() {
        return compose(year, month, day, 0, 0, 0, 0);
    }
    if !(c.eat(b'T') || c.eat(b't') || c.eat(b' ')) {
        return None;
    }
    let h = c.digits(2)?;
    (c.eat(b':')).then_some(())?;
    let mi = c.digits(2)?;
    let (mut sec, mut ms) = (0, 0);
    if c.eat(b':') {
        sec = c.digits(2)?;
        if c.eat(b'.') {
            ms = c.fraction_ms()?;
        }
    }
    let offset_min = parse_offset(&mut c)?;
    if !c.done() {
        return None;
    }
    let end_of_day = h == 24 && mi == 0 && sec == 0 && ms == 0;
    if (h > 23 && !end_of_day) || mi > 59 || sec > 59 {
        return None;
    }
    let t = compose(year, month, day, h, mi, sec, ms)?;
    let t = t.checked_sub(offset_min * 60_000)?;
    (t.abs() <= JS_DATE_LIMIT_MS).then_some(t)
}

/// An optional zone at the cursor: nothing, `Z`/`z`, `±HH:mm` or `±HHmm`; minutes east of UTC.
fn parse_offset(c: &mut Cursor<'_>) -> Option<i64> {
    if c.done() {
        return Some(0);
    }
    if c.eat(b'Z') || c.eat(b'z') {
        return Some(0);
    }
    let sign = if c.eat(b'+') {
        1
    } else if c.eat(b'-') {
        -1
    } else {
        return None;
    };
    let oh = c.digits(2)?;
    c.eat(b':');
    let om = c.digits(2)?;
    if oh > 23 || om > 59 {
        return None;
    }
    Some(sign * (oh * 60 + om))
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// The `toUTCString`, `toString`, RFC 2822 and slash forms:
/// `[Wdy[,]] DD Mon YYYY [HH:mm[:ss]] [zone]` or `[Wdy] Mon DD[,] YYYY [HH:mm[:ss]] [zone]`,
/// or `YYYY/MM[/DD] …` / `MM/DD/YYYY …`, zone being `GMT`/`UTC`/`Z`, optionally followed by
/// `±HHmm`, then an optional `(comment)`.
fn parse_legacy(s: &str) -> Option<i64> {
    // Drop a trailing "(Coordinated Universal Time)"-style comment.
    let s = match s.find('(') {
        Some(i) if s.ends_with(')') => s.get(..i)?.trim_end(),
        Some(_) => return None,
        None => s,
    };
    let mut words: Vec<&str> = s.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    if words.len() > 8 {
        return None;
    }
    let lower = |w: &str| w.to_ascii_lowercase();
    let month_of = |w: &str| {
        let w = lower(w);
        MONTHS
            .iter()
            .position(|m| w.len() >= 3 && w.starts_with(m))
            .map(|p| p as i64 + 1)
    };
    if let Some(first) = words.first() {
        let f = lower(first);
        if WEEKDAYS.iter().any(|d| f.len() >= 3 && f.starts_with(d)) {
            words.remove(0);
        }
    }
    let number = |w: &str, max_len: usize| -> Option<i64> {
        (!w.is_empty() && w.len() <= max_len && w.bytes().all(|b| b.is_ascii_digit()))
            .then(|| w.parse().ok())
            .flatten()
    };
    let (month, day, year, rest) = match words.as_slice() {
        [m, d, y, rest @ ..] if month_of(m).is_some() => {
            (month_of(m)?, number(d, 2)?, number(y, 4)?, rest)
        }
        [d, m, y, rest @ ..] if month_of(m).is_some() => {
            (month_of(m)?, number(d, 2)?, number(y, 4)?, rest)
        }
        [date, rest @ ..] if date.contains('/') => {
            let parts: Vec<&str> = date.split('/').collect();
            match parts.as_slice() {
                [y, m, d] if y.len() == 4 => (number(m, 2)?, number(d, 2)?, number(y, 4)?, rest),
                [y, m] if y.len() == 4 => (number(m, 2)?, 1, number(y, 4)?, rest),
                [m, d, y] if y.len() == 4 => (number(m, 2)?, number(d, 2)?, number(y, 4)?, rest),
                _ => return None,
            }
        }
        _ => return None,
    };
    if !(1..=12).contains(&month) {
        return None;
    }
    if !(1..=31).contains(&day) {
        return None;
    }
    let (mut h, mut mi, mut sec) = (0, 0, 0);
    let mut rest = rest;
    if let Some((time, tail)) = rest.split_first() {
        if time.contains(':') {
            let mut c = Cursor::new(time);
            h = c.digit_run(2)?.0;
            (c.eat(b':')).then_some(())?;
            mi = c.digits(2)?;
            if c.eat(b':') {
                sec = c.digits(2)?;
            }
            if !c.done() || h > 23 || mi > 59 || sec > 59 {
                return None;
            }
            rest = tail;
        }
    }
    let offset_min = match rest {
        [] => 0,
        [zone] => legacy_zone(zone)?,
        _ => return None,
    };
    let t = compose(year, month, day, h, mi, sec, 0)?;
    let t = t.checked_sub(offset_min * 60_000)?;
    (t.abs() <= JS_DATE_LIMIT_MS).then_some(t)
}

/// `GMT`, `UTC`, `Z`, optionally followed by `±HHmm` / `±HH:mm`, or a bare `±HHmm`.
fn legacy_zone(zone: &str) -> Option<i64> {
    let upper = zone.to_ascii_uppercase();
    let tail = ["GMT", "UTC", "UT", "Z"]
        .iter()
        .find_map(|p| upper.strip_prefix(p))
        .unwrap_or(upper.as_str());
    let mut c = Cursor::new(tail);
    let off = parse_offset(&mut c)?;
    c.done().then_some(off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_ms_prints_like_to_iso_string() {
        assert_eq!(iso_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_ms(1_764_427_167_123), "2025-11-29T14:39:27.123Z");
        assert_eq!(iso_ms(1_795_963_620_919), "2026-11-29T14:47:00.919Z");
        assert_eq!(iso_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso_ms(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(iso_ms(253_402_300_800_000), "+010000-01-01T00:00:00.000Z");
        assert!(!iso_ms(u64::MAX).is_empty());
    }

    #[test]
    fn strict_iso_roundtrips_and_refuses_other_forms() {
        for ms in [
            0u64,
            1,
            999,
            1_764_427_167_123,
            951_782_400_000,
            253_402_300_799_999,
        ] {
            assert_eq!(parse_iso_strict(&iso_ms(ms)), Some(ms));
        }
        assert_eq!(
            parse_iso_strict("2026-11-29T14:00:00Z"),
            Some(1_795_960_800_000)
        );
        assert_eq!(
            parse_iso_strict("2026-11-29T14:00:00.5Z"),
            Some(1_795_960_800_500)
        );
        assert_eq!(
            parse_iso_strict("2026-11-29T14:00:00.123456Z"),
            Some(1_795_960_800_123)
        );
        for bad in [
            "2026-11-29",
            "2026-11-29T14:00Z",
            "2026-11-29T14:00:00.000",
            "2026-11-29T14:00:00.000+00:00",
            "2026-11-29 14:00:00.000Z",
            "2026-02-29T00:00:00.000Z",
            "2026-13-01T00:00:00.000Z",
            "2026-00-01T00:00:00.000Z",
            "2026-11-31T00:00:00.000Z",
            "2026-11-29T24:00:00.000Z",
            "2026-11-29T14:60:00.000Z",
            "2026-11-29T14:00:60.000Z",
            "2026-11-29T14:00:00.Z",
            "2026-11-29T14:00:00.000Zx",
            "+02026-11-29T14:00:00.000Z",
            "2026-11-29t14:00:00.000z",
            "２026-11-29T14:00:00.000Z",
            "",
        ] {
            assert_eq!(parse_iso_strict(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn utc_instant_is_the_t344_form_on_a_real_calendar() {
        let t = 1_795_960_800_000i64; // 2026-11-29T14:00:00Z
        for (ok, ms) in [
            ("2026-11-29T14:00:00Z", t),
            ("2026-11-29T14:00:00.5Z", t + 500),
            ("2026-11-29T14:00:00.12Z", t + 120),
            ("2026-11-29T14:00:00.123Z", t + 123),
            ("2024-02-29T00:00:00Z", 1_709_164_800_000),
            ("2000-02-29T23:59:59.999Z", 951_868_799_999),
            ("1969-12-31T23:59:59Z", -1000),
            ("0000-01-01T00:00:00Z", -62_167_219_200_000),
            ("9999-12-31T23:59:59.999Z", 253_402_300_799_999),
        ] {
            assert_eq!(parse_utc_instant(ok), Some(ms), "{ok:?}");
        }
        for bad in [
            "2026-11-29T14:00:00.1234Z",
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-11-00T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T14:60:00Z",
            "2026-11-29T14:00:60Z",
            "2026-11-29",
            "2026-11-29T14:00Z",
            "2026-11-29T14:00:00",
            "2026-11-29T14:00:00+00:00",
            "2026-11-29T14:00:00.000+01:00",
            "2026-11-29 14:00:00Z",
            "2026-11-29t14:00:00z",
            "2026-11-29T14:00:00.Z",
            "+002026-11-29T14:00:00Z",
            "Sun, 29 Nov 2026 14:00:00 GMT",
            " 2026-11-29T14:00:00Z",
            "2026-11-29T14:00:00Z\n",
            "٢026-11-29T14:00:00Z",
            "",
        ] {
            assert_eq!(parse_utc_instant(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn loose_parse_accepts_js_forms() {
        let t = 1_795_960_800_000i64; // 2026-11-29T14:00:00Z
        let day = 1_795_910_400_000i64; // 2026-11-29T00:00:00Z
        let cases: &[(&str, i64)] = &[
            ("2026-11-29T14:00:00.000Z", t),
            ("2026-11-29T14:00:00Z", t),
            ("2026-11-29T14:00Z", t),
            ("2026-11-29T14:00", t),
            ("2026-11-29 14:00:00", t),
            ("2026-11-29T15:00:00+01:00", t),
            ("2026-11-29T09:30:00-0430", t),
            ("2026-11-29T14:00:00.000000Z", t),
            ("2026-11-29", day),
            ("2026-11", 1_793_491_200_000),
            ("2026", 1_767_225_600_000),
            ("+002026-11-29T14:00:00.000Z", t),
            ("2026-11-28T24:00:00Z", day),
            ("2026-02-30", 1_772_409_600_000), // rolls over to 2026-03-02 like V8
            ("Sun, 29 Nov 2026 14:00:00 GMT", t),
            (
                "Sun Nov 29 2026 14:00:00 GMT+0000 (Coordinated Universal Time)",
                t,
            ),
            ("Sun Nov 29 2026 15:00:00 GMT+0100", t),
            ("Nov 29, 2026", day),
            ("29 Nov 2026 14:00 UTC", t),
            ("2026/11/29", day),
            ("2026/11", 1_793_491_200_000),
            ("11/29/2026 14:00:00", t),
            ("2026/11/29 15:00 GMT+0100", t),
            (" 2026-11-29T14:00:00Z ", t),
        ];
        for (s, want) in cases {
            assert_eq!(parse_date_loose(s), Some(*want), "{s:?}");
        }
    }

    #[test]
    fn loose_parse_rejects_garbage() {
        for bad in [
            "",
            "yesterday",
            "now",
            "2026-13-01",
            "2026-11-32",
            "2026-11-29T25:00",
            "2026-11-29T14:00:00+25:00",
            "2026-11-29X14:00",
            "-000000-01-01",
            "Sun, 29 Nov 2026 14:00:00 Mars",
            "2026-11-29T14:00:00.Z",
            "2026年11月29日",
            "2026/13/29",
            "26/11/29",
            "+999999-01-01",
        ] {
            assert_eq!(parse_date_loose(bad), None, "{bad:?}");
        }
    }

    /// The forms a v2 enc ad's `iat` / `exp` arrive in (docs/protocol.md §3): hosts send
    /// `toISOString()`; RFC 3339 with any offset, no offset (UTC) and a bare date also count.
    #[test]
    fn enc_ad_dates_accept_iso_8601_and_rfc_3339_forms() {
        let t = 1_795_960_800_123i64; // 2026-11-29T14:00:00.123Z
        let cases: &[(&str, &str, i64)] = &[
            ("toISOString", "2026-11-29T14:00:00.123Z", t),
            (
                "RFC 3339 Z without fraction",
                "2026-11-29T14:00:00Z",
                t - 123,
            ),
            (
                "RFC 3339 positive offset",
                "2026-11-29T19:30:00.123+05:30",
                t,
            ),
            (
                "RFC 3339 negative offset",
                "2026-11-29T09:00:00.123-05:00",
                t,
            ),
            ("RFC 3339 zero offset", "2026-11-29T14:00:00.123+00:00", t),
            ("ISO basic offset", "2026-11-29T15:00:00.123+0100", t),
            ("no offset is UTC", "2026-11-29T14:00:00.123", t),
            ("no offset, no seconds", "2026-11-29T14:00", t - 123),
            ("RFC 3339 lowercase", "2026-11-29t14:00:00.123z", t),
            ("RFC 3339 space separator", "2026-11-29 14:00:00.123Z", t),
            ("microseconds", "2026-11-29T14:00:00.123456Z", t),
            ("bare date", "2026-11-29", 1_795_910_400_000),
        ];
        for (what, s, want) in cases {
            assert_eq!(parse_date_loose(s), Some(*want), "{what}: {s:?}");
        }
    }

    #[test]
    fn enc_ad_dates_refuse_junk() {
        for bad in [
            "",
            " ",
            "junk",
            "tomorrow",
            "1795960800123",
            "2026-11-29T14:00:00.123Q",
            "2026-11-29T14:00:00+5",
            "2026-11-29T14:00:00+05:3",
            "2026-11-29T14:00:00.123Z junk",
            "2026-11-29TT14:00",
            "2026-11-29T1:00",
            "2026-1-29",
            "2026-11-29T14:00:00.123\u{0}",
            "29.11.2026",
        ] {
            assert_eq!(parse_date_loose(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn calendar_helpers_agree() {
        for days in [-800_000i64, -1, 0, 1, 59, 10_957, 20_000, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
