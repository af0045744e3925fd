//! Name rules (skeleton).
pub fn is_host_name(s: &str) -> bool {
    let _ = s;
    todo!()
}
pub fn is_owner_fp(s: &str) -> bool {
    let _ = s;
    todo!()
}
pub fn is_ulid(s: &str) -> bool {
    let _ = s;
    todo!()
}
pub fn is_local_name(s: &str) -> bool {
    let _ = s;
    todo!()
}
