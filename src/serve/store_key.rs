//! Which relay key a store belongs to, decided before `serve` writes anything. A store pins the
//! key of its first start (a restored store keeps the backup's), so a start without that key is
//! a setting error (exit 2) and never generates a new `relay.key` into the store directory: a
//! restore started without `MBX_RELAY_KEY` must not be left refusing every later start.
//! `serve --check` asks the same question ([`decide`]) of a store not in use.

use std::path::Path;

use relay_core::{KeySource, KEY_ENV, KEY_FILE};
use relay_store::Key32;
use relay_wire::keys::{fingerprint, SigningKey};

/// A relay key found at start (`MBX_RELAY_KEY` or `relay.key`) and where it came from.
pub(crate) type FoundKey = (SigningKey, KeySource);

/// The key to start with over a store that pins `pinned`: `found` when it matches the store (or
/// the store pins none yet); `None` when there is no key anywhere and the store pins none (a
/// first start: generate one).
///
/// # Errors
/// The store pins a key and none was given, or another one was: a message naming the store's
/// key by fingerprint and how to give it (never key material).
pub(crate) fn decide(
    pinned: Option<&Key32>,
    found: Option<FoundKey>,
    dir: &Path,
) -> Result<Option<FoundKey>, String> {
    match (pinned, found) {
        (None, None) => Ok(None),
        (None, Some(found)) => Ok(Some(found)),
        (Some(pk), None) => Err(format!(
            "the store belongs to relay key {}, and neither {KEY_ENV} nor {} holds a key: set \
             {KEY_ENV} to that key (a restored store needs the old relay's key), or put its \
             relay.key in {} (mode 0600); no key was generated",
            fingerprint(pk),
            dir.join(KEY_FILE).display(),
            dir.display()
        )),
        (Some(pk), Some((key, source))) if key.public() != *pk => Err(format!(
            "relay key refused: the store belongs to relay key {}, but {} holds key {}; give the \
             store's own key",
            fingerprint(pk),
            source_name(source, dir),
            fingerprint(&key.public())
        )),
        (Some(_), Some(found)) => Ok(Some(found)),
    }
}

/// Where a key came from, in the operator's words: `MBX_RELAY_KEY` or the file's path.
pub(crate) fn source_name(source: KeySource, dir: &Path) -> String {
    match source {
        KeySource::Env => KEY_ENV.to_string(),
        KeySource::File => dir.join(KEY_FILE).display().to_string(),
        KeySource::Generated => format!("{} (generated)", dir.join(KEY_FILE).display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_that_pins_a_key_is_refused_without_it_and_with_another() {
        let dir = Path::new("/srv/relay");
        let owner = SigningKey::generate();
        let other = SigningKey::generate();
        let pk = owner.public();
        let none = decide(Some(&pk), None, dir).err().unwrap_or_default();
        assert!(none.contains(&fingerprint(&pk)), "{none}");
        assert!(none.contains("no key was generated"), "{none}");
        let wrong = decide(Some(&pk), Some((other, KeySource::Env)), dir)
            .err()
            .unwrap_or_default();
        assert!(wrong.contains("MBX_RELAY_KEY holds key"), "{wrong}");
        assert!(matches!(
            decide(Some(&pk), Some((owner, KeySource::File)), dir),
            Ok(Some(_))
        ));
        assert!(matches!(decide(None, None, dir), Ok(None)));
    }
}
