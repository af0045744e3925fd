//! What an admin's revocation or purge needs from the relay: the quotas and retention that
//! expiry notices are queued under, and the relay key that signs them (the same notices as the
//! retention sweep's, built by [`super::sweep::notice_fn`]); and, online, the waiters it ends.

use std::sync::Arc;

use relay_store::{Key32, NoticeFn, Quotas, RevokeRequest};

use super::config::Limits;
use super::sweep::notice_fn;
use super::wake::Wake;
use super::Relay;
use relay_wire::keys::SigningKey;

/// Builds revoke/purge requests and their notice signer (online: the relay's; offline:
/// relay-tool's, over the relay key loaded from the store directory).
#[derive(Clone)]
pub struct Revoker {
    key: Arc<SigningKey>,
    quotas: Quotas,
    retention_ms: u64,
    /// The serving relay's waiters (online only): the key's are ended once the change commits.
    waiters: Option<Arc<Wake>>,
}

impl Revoker {
    /// A revoker signing with `key` under `limits`' quotas and retention.
    pub fn new(key: Arc<SigningKey>, limits: &Limits) -> Self {
        Revoker {
            key,
            quotas: limits.quotas(),
            retention_ms: limits.retention_ms(),
            waiters: None,
        }
    }

    /// End `key`'s waiting pulls and streams on the serving relay (nothing offline): `revoked`
    /// after a revocation, else (a purge of a live key) as an eviction.
    pub fn end_waiters(&self, key: &Key32, revoked: bool) {
        if let Some(w) = &self.waiters {
            w.end_key(key, revoked);
        }
    }

    /// The relay public key the notices are signed with.
    pub fn relay_pubkey(&self) -> Key32 {
        self.key.public()
    }

    /// The store request for revoking (`revoke`) and/or purging (`purge`) `key`.
    pub fn request(
        &self,
        key: Key32,
        revoke: bool,
        purge: bool,
        admin_uid: u32,
        reason: &str,
    ) -> RevokeRequest {
        RevokeRequest {
            key,
            revoke,
            purge,
            quotas: self.quotas,
            retention_ms: self.retention_ms,
            admin_uid,
            reason: reason.to_string(),
        }
    }

    /// The expiry-notice builder for the purged envelopes.
    pub fn notices(&self) -> NoticeFn {
        notice_fn(self.key.clone())
    }
}

impl Relay {
    /// The revoker of this relay (its key, quotas and retention), for the admin socket.
    pub fn revoker(&self) -> Revoker {
        Revoker {
            waiters: Some(self.wake.clone()),
            ..Revoker::new(self.key.clone(), &self.limits)
        }
    }
}
