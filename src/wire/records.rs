//! Signed records (skeleton).
use super::keys::SigningKey;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    Malformed(String),
    FutureIat,
    BadSignature,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self)
    }
}
impl std::error::Error for RecordError {}

pub fn enrol_statement(challenge: &str, host: &str, pubkey: &str, owner_fp: &str) -> Value {
    let _ = (challenge, host, pubkey, owner_fp);
    todo!()
}
pub fn enc_ad_statement(host: &str, enc_pub: &str) -> Value {
    let _ = (host, enc_pub);
    todo!()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderListRecord {
    pub host_pubkey: [u8; 32],
    pub senders: Vec<[u8; 32]>,
    pub iat_ms: u64,
    pub canonical: String,
}

pub fn parse_sender_list(
    body: &Value,
    now_ms: u64,
) -> Result<(SenderListRecord, String), RecordError> {
    let _ = (body, now_ms);
    todo!()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    pub host: String,
    pub old_pub: [u8; 32],
    pub new_pub: [u8; 32],
    pub new_enc_pub: String,
    pub iat: String,
}

pub fn parse_rotation(body: &Value) -> Result<Rotation, RecordError> {
    let _ = body;
    todo!()
}

pub fn expiry_notice_wire(
    key: &SigningKey,
    item_id: &str,
    target_pubkey: &str,
    accepted_at_ms: u64,
    expired_at_ms: u64,
) -> Vec<u8> {
    let _ = (key, item_id, target_pubkey, accepted_at_ms, expired_at_ms);
    todo!()
}
