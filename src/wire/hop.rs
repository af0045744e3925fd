//! Signed hops (skeleton).
use super::keys::SigningKey;

pub const HOP_SKEW_MS: i64 = 300_000;

pub fn hop_payload(method: &str, path: &str, ts: &str, body: &str) -> String {
    let _ = (method, path, ts, body);
    todo!()
}
pub fn sign_hop(key: &SigningKey, method: &str, path: &str, ts: &str, body: &str) -> String {
    let _ = (key, method, path, ts, body);
    todo!()
}
pub fn verify_hop(
    pk: &[u8; 32],
    method: &str,
    path: &str,
    ts: &str,
    body: &str,
    sig_b64: &str,
) -> bool {
    let _ = (pk, method, path, ts, body, sig_b64);
    todo!()
}
pub fn ts_fresh(ts: &str, now_ms: i64) -> bool {
    let _ = (ts, now_ms);
    todo!()
}
pub fn signed_path(path: &str, query: Option<&str>) -> String {
    let _ = (path, query);
    todo!()
}
