//! The host's key files in its store directory: `host.key` (Ed25519 seed, base64) and `enc.key`
//! (X25519 secret, base64), both created with mode 0600 and never printed.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use super::hostdir::{ENC_KEY, HOST_KEY};
use super::HostError;
use relay_wire::keys::SigningKey;
use relay_wire::seal::EncSecret;

/// The host's two keys.
#[derive(Debug)]
pub(crate) struct Identity {
    pub host: SigningKey,
    pub enc: EncSecret,
}

/// Write a new file with mode 0600, refusing to overwrite an existing one.
pub(crate) fn write_secret(path: &Path, contents: &str) -> Result<(), HostError> {
    let mut o = OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o
        .open(path)
        .map_err(|e| HostError::Store(format!("cannot create {}: {e}", path.display())))?;
    f.write_all(contents.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| HostError::Store(format!("cannot write {}: {e}", path.display())))
}

pub(crate) fn read_secret(path: &Path) -> Result<String, HostError> {
    std::fs::read_to_string(path).map_err(|e| {
        HostError::Store(format!(
            "cannot read {} ({e}); run `mbx-relay host --dir DIR init --name NAME` first",
            path.display()
        ))
    })
}

impl Identity {
    /// Generate both keys and write them (0600). Fails if either file already exists.
    ///
    /// # Errors
    /// The directory cannot be created or a key file exists or cannot be written.
    pub(crate) fn create(dir: &Path) -> Result<Self, HostError> {
        super::hostdir::create(dir)?;
        if dir.join(HOST_KEY).exists() || dir.join(ENC_KEY).exists() {
            return Err(HostError::Usage(format!(
                "{} already holds a host",
                dir.display()
            )));
        }
        let id = Identity {
            host: SigningKey::generate(),
            enc: EncSecret::generate(),
        };
        write_secret(&dir.join(HOST_KEY), &id.host.seed_b64())?;
        write_secret(&dir.join(ENC_KEY), &id.enc.secret_b64())?;
        // Both names durable before `init` answers (each file is fsync'd, not its name).
        relay_os::durable_dir::sync_dir(dir)
            .map_err(|e| HostError::Store(format!("cannot fsync {}: {e}", dir.display())))?;
        Ok(id)
    }

    /// Load both keys.
    ///
    /// # Errors
    /// Missing or damaged key files (the message names the file, never its contents).
    pub(crate) fn load(dir: &Path) -> Result<Self, HostError> {
        let host = SigningKey::from_key_file(&read_secret(&dir.join(HOST_KEY))?)
            .map_err(|e| HostError::Store(format!("{}: {e}", dir.join(HOST_KEY).display())))?;
        let enc = EncSecret::from_b64(&read_secret(&dir.join(ENC_KEY))?).ok_or_else(|| {
            HostError::Store(format!(
                "{}: not a 32-byte base64 key",
                dir.join(ENC_KEY).display()
            ))
        })?;
        Ok(Identity { host, enc })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_are_private_and_reload_to_the_same_keys() {
        let dir = super::super::hostdir::private_tempdir();
        let id = Identity::create(dir.path()).unwrap();
        #[cfg(unix)]
        for f in [HOST_KEY, ENC_KEY] {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        let again = Identity::load(dir.path()).unwrap();
        assert_eq!(again.host.public(), id.host.public());
        assert_eq!(again.enc.public(), id.enc.public());
        assert!(
            Identity::create(dir.path()).is_err(),
            "never overwrites a host"
        );
    }

    #[test]
    fn a_missing_key_file_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let e = Identity::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("init --name"), "{e}");
    }
}
