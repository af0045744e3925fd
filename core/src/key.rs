//! The relay's own Ed25519 key (docs/protocol.md §6): from `MBX_RELAY_KEY`, else `relay.key` in the
//! store directory (refused when other users can reach it), else generated and written there
//! atomically with mode 0600.
//! No error or log line here ever contains key material: keys are named by fingerprint.

use std::io::Write as _;
use std::path::Path;

use relay_os::private::{create_exclusive, require_private, Kind};
use relay_wire::keys::{fingerprint, SigningKey};

/// The file name of the relay key inside the store directory.
pub const KEY_FILE: &str = "relay.key";
/// The environment variable that carries the key as a deploy secret.
pub const KEY_ENV: &str = "MBX_RELAY_KEY";

/// Where the key came from, for the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// From the `MBX_RELAY_KEY` environment variable.
    Env,
    /// From the store directory's key file.
    File,
    /// Generated at this start (a new store).
    Generated,
}

/// Load the relay key: `env_value` (the content of `MBX_RELAY_KEY`) wins, then `dir/relay.key`,
/// else a new key is generated and written to `dir/relay.key` (0600, atomic rename).
///
/// # Errors
/// A message naming the source that failed (never the key itself); a `relay.key` that group or
/// other users may access is refused with the `chmod` that fixes it (the key may have leaked:
/// the operator decides).
pub fn load_or_create(
    dir: &Path,
    env_value: Option<&str>,
) -> Result<(SigningKey, KeySource), String> {
    if let Some(found) = load_existing(dir, env_value)? {
        return Ok(found);
    }
    let key = SigningKey::generate();
    write_key_file(dir, &key)?;
    Ok((key, KeySource::Generated))
}

/// Load the relay key as [`load_or_create`] does, but never generate one: `None` when neither
/// `MBX_RELAY_KEY` nor `dir/relay.key` holds a key (relay-tool signs expiry notices offline
/// with the relay's own key or not at all).
///
/// # Errors
/// As [`load_or_create`].
pub fn load_existing(
    dir: &Path,
    env_value: Option<&str>,
) -> Result<Option<(SigningKey, KeySource)>, String> {
    if let Some(v) = env_value.filter(|v| !v.trim().is_empty()) {
        let key = SigningKey::from_key_file(v.trim())
            .map_err(|e| format!("{KEY_ENV} is not a valid relay key ({e})"))?;
        return Ok(Some((key, KeySource::Env)));
    }
    let path = dir.join(KEY_FILE);
    match std::fs::metadata(&path) {
        Ok(_) => require_private(&path, Kind::File, "relay key file")?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    }
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let key = SigningKey::from_key_file(text.trim())
                .map_err(|e| format!("{} is not a valid relay key ({e})", path.display()))?;
            Ok(Some((key, KeySource::File)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Write `dir/relay.key` (the base64 seed) with mode 0600: a new temp file (exclusive create, no
/// link followed), fsync, rename, fsync dir.
fn write_key_file(dir: &Path, key: &SigningKey) -> Result<(), String> {
    let tmp = dir.join(format!("{KEY_FILE}.tmp.{}", std::process::id()));
    let path = dir.join(KEY_FILE);
    let io = |what: &str, e: std::io::Error| format!("cannot {what} {}: {e}", path.display());
    let mut f =
        create_exclusive(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io("chmod", e))?;
    }
    let mut text = key.seed_b64();
    text.push('\n');
    let written = f.write_all(text.as_bytes()).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("write", e));
    }
    std::fs::rename(&tmp, &path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("rename into", e)
    })?;
    // The name is durable only once the directory is synced: a key lost to a power cut would
    // be regenerated, and every enrolled host's hops would then fail.
    relay_os::durable_dir::sync_dir(dir).map_err(|e| io("fsync the directory of", e))
}

/// `seed: <b64>\nfingerprint: <fp>\npublic: <b64>` for `mbx-relay keygen` (stdout only).
pub fn keygen_text(key: &SigningKey) -> String {
    format!(
        "seed: {}\nfingerprint: {}\npublic: {}\n",
        key.seed_b64(),
        fingerprint(&key.public()),
        key.public_b64()
    )
}
