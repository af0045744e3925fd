//! Helpers of every hand-written SVG chart: axis tops and text escaping.

/// A "nice" axis top at or above `v` (1, 2 or 5 times a power of ten); 1 for no data.
pub fn nice_ceiling(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

/// Text safe inside SVG.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_tops_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
        assert_eq!(nice_ceiling(1.0), 1.0);
        assert_eq!(nice_ceiling(1.2), 2.0);
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(4_300.0), 5_000.0);
        assert_eq!(nice_ceiling(5_001.0), 10_000.0);
        assert_eq!(nice_ceiling(200.0), 200.0);
    }

    #[test]
    fn markup_characters_are_escaped() {
        assert_eq!(esc("a<b & c>d"), "a&lt;b &amp; c&gt;d");
    }
}
