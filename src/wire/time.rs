//! Time formats (skeleton).
pub fn iso_ms(ms: u64) -> String {
    let _ = ms;
    todo!()
}
pub fn parse_iso_strict(s: &str) -> Option<u64> {
    let _ = s;
    todo!()
}
pub fn parse_date_loose(s: &str) -> Option<i64> {
    let _ = s;
    todo!()
}
