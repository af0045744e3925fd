//! Key fingerprints as every backend writes them in errors and relay-log details.

/// `ab12-cd34-ef56-7890`: first 16 hex chars of sha256(key), grouped by 4.
pub fn fingerprint(key: &[u8]) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(key);
    let hex: String = h.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let groups: Vec<&str> = (0..4).map(|i| &hex[i * 4..i * 4 + 4]).collect();
    groups.join("-")
}
