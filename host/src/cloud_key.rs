//! Enrolling on a hosted relay with an account token (docs/protocol.md §3 "Account tokens"): the
//! host's cloud key (`cloud.key`, 0600, made once), whose RFC 7638 thumbprint the accounts
//! service binds the token to (`cnf.jkt`), and the enrol `proof`: the token read from the file
//! `relay set --token-file` named (whoever renews the token rewrites that file), the cloud-key
//! certificate for the relay's URL, and the host key's signature over it.

use std::path::Path;

use serde_json::{json, Value};

use relay_wire::cloud_key::{certificate, thumbprint};
use relay_wire::keys::SigningKey;

use super::identity::{read_secret, write_secret};
use super::HostError;

/// The cloud key's file in the host directory.
const CLOUD_KEY: &str = "cloud.key";
/// The longest token file read.
const MAX_TOKEN_BYTES: u64 = 8 * 1024;

/// The host's cloud key, made (and written 0600) on first use.
///
/// # Errors
/// The file cannot be read or written, or holds no key.
pub(crate) fn load_or_create(dir: &Path) -> Result<SigningKey, HostError> {
    let path = dir.join(CLOUD_KEY);
    if !path.exists() {
        write_secret(&path, &SigningKey::generate().seed_b64())?;
    }
    SigningKey::from_key_file(&read_secret(&path)?)
        .map_err(|e| HostError::Store(format!("{}: {e}", path.display())))
}

/// `{"cloud_pub", "jkt"}`: what the accounts service binds this host's tokens to.
///
/// # Errors
/// As [`load_or_create`].
pub(crate) fn describe(dir: &Path) -> Result<Value, HostError> {
    let key = load_or_create(dir)?;
    Ok(json!({ "cloud_pub": key.public_b64(), "jkt": thumbprint(&key.public()) }))
}

/// The enrol `proof` for the relay at `relay_url`: the token in `token_file`, and the cloud-key
/// certificate signed by `host`, made now.
///
/// # Errors
/// The token file cannot be read, is empty or too long; the cloud key cannot be read.
pub(crate) fn proof(
    dir: &Path,
    host: &SigningKey,
    token_file: &Path,
    relay_url: &str,
    now_s: u64,
) -> Result<Value, HostError> {
    let fail =
        |why: String| HostError::Usage(format!("token file {}: {why}", token_file.display()));
    let len = std::fs::metadata(token_file)
        .map_err(|e| fail(e.to_string()))?
        .len();
    if len > MAX_TOKEN_BYTES {
        return Err(fail(format!("longer than {MAX_TOKEN_BYTES} bytes")));
    }
    let token = std::fs::read_to_string(token_file).map_err(|e| fail(e.to_string()))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(fail("empty".into()));
    }
    let cloud = load_or_create(dir)?;
    let cert = certificate(&host.public(), &cloud.public(), relay_url, now_s);
    let sig = host.sign_canonical(&cert);
    Ok(json!({ "token": token, "cloud_cert": cert, "cloud_cert_sig": sig }))
}
