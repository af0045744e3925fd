//! The relay-log texts every backend writes, one statement of each (a backup moves a log
//! between backends, and `relay-tool log` shows them the same whichever wrote them):
//! fingerprints, names and counts only, never key bytes or wire data.

use crate::fingerprint::fingerprint;
use crate::types::{
    DenyEntry, DenySubject, Enrolment, Invite, InviteHash, Key32, RevokeReport, RevokeRequest,
    MAX_REASON_CHARS,
};

/// `enrol`: a first enrolment: fingerprint, name, account, owner claim, authority.
pub fn enrolled(e: &Enrolment) -> String {
    format!(
        "{} name {:?} account {} owner {:?} by {}",
        fingerprint(&e.host_pubkey),
        e.host_name,
        e.account.as_deref().unwrap_or("-"),
        e.owner_fp,
        e.authorized_by
    )
}

/// `re-enrol`: the key and each field that changed, old -> new.
pub fn re_enrolled(old: &Enrolment, new: &Enrolment) -> String {
    let mut out = fingerprint(&new.host_pubkey);
    let account = |e: &Enrolment| e.account.clone().unwrap_or_else(|| "-".into());
    for (name, a, b) in [
        (
            "name",
            format!("{:?}", old.host_name),
            format!("{:?}", new.host_name),
        ),
        (
            "owner",
            format!("{:?}", old.owner_fp),
            format!("{:?}", new.owner_fp),
        ),
        ("account", account(old), account(new)),
        (
            "authority",
            old.authorized_by.clone(),
            new.authorized_by.clone(),
        ),
        (
            "rank",
            old.authority_rank.to_string(),
            new.authority_rank.to_string(),
        ),
    ] {
        if a != b {
            out.push_str(&format!(" {name} {a} -> {b}"));
        }
    }
    out
}

/// `rotate-key`: `<old fp> -> <new fp>: N items moved`.
pub fn rotated(old: &Key32, new: &Key32, moved: u64) -> String {
    format!(
        "{} -> {}: {moved} items moved",
        fingerprint(old),
        fingerprint(new)
    )
}

/// `expire-idle`: how many idle enrolments one call deleted, and the idle time in days.
pub fn idle_expired(expired: u64, idle_days: u64) -> String {
    format!("{expired} idle enrolments expired (not seen for {idle_days}d or more, queue empty)")
}

/// `revoke` / `purge`: `<fp>: revoked, 1 allowlists changed, 3 items (1200 bytes) purged,
/// 2 notices; uid 1000; reason: stolen laptop` (the reason cut to one bounded line).
pub fn revoked(req: &RevokeRequest, r: &RevokeReport) -> String {
    let mut parts = Vec::new();
    if req.revoke {
        parts.push(if r.already_revoked {
            "already revoked".to_string()
        } else {
            "revoked".to_string()
        });
        parts.push(format!("{} allowlists changed", r.lists_changed));
    }
    if req.purge {
        parts.push(format!(
            "{} items ({} bytes) purged, {} notices",
            r.purged_items, r.purged_bytes, r.notices
        ));
    }
    format!(
        "{}: {}; uid {}; reason: {}",
        fingerprint(&req.key),
        parts.join(", "),
        req.admin_uid,
        one_line_reason(&req.reason)
    )
}

/// An invite's id in the log and listings: the first 8 bytes of its hash in hex (the hash of a
/// random code: it names the invite and reveals nothing of the code).
pub fn invite_id(hash: &InviteHash) -> String {
    hash[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// `invite`: `<id> expires <ms>; pruned N expired; note: ...`.
pub fn invite_issued(i: &Invite, pruned: u64) -> String {
    format!(
        "{} expires {}; {pruned} expired pruned; note: {}",
        invite_id(&i.hash),
        i.expires_ms,
        one_line_reason(&i.note)
    )
}

/// `deny`: `host <fp>|client <id> until <ms>; N expired pruned; note: ...`.
pub fn deny_added(e: &DenyEntry, pruned: u64) -> String {
    let subject = match &e.subject {
        DenySubject::Host(k) => format!("host {}", fingerprint(k)),
        DenySubject::Client(c) => format!("client {}", one_line_reason(c)),
    };
    format!(
        "{subject} until {}; {pruned} expired pruned; note: {}",
        e.expires_ms,
        one_line_reason(&e.note)
    )
}

/// `invite-redeemed`: `<id> by <fp>`.
pub fn invite_redeemed(hash: &InviteHash, key: &Key32) -> String {
    format!("{} by {}", invite_id(hash), fingerprint(key))
}

/// The reason on one line, at most [`MAX_REASON_CHARS`] characters; `-` when empty.
pub fn one_line_reason(reason: &str) -> String {
    let r: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_REASON_CHARS)
        .collect();
    let r = r.trim();
    if r.is_empty() {
        "-".to_string()
    } else {
        r.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_one_bounded_line_and_dash_when_empty() {
        assert_eq!(one_line_reason(""), "-");
        assert_eq!(one_line_reason(" a\nb\t"), "a b");
        assert_eq!(
            one_line_reason(&"x".repeat(MAX_REASON_CHARS + 9)).len(),
            MAX_REASON_CHARS
        );
    }
}
