//! The one place a store backend is chosen and opened: everything above it (relay, admin
//! socket, relay-tool) holds the [`SharedStore`] it returns and knows no backend.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use relay_store::{OpenOptions, SharedStore, StoreError};

/// Which backend and where, from `serve --store` / `MBX_RELAY_STORE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// A fjall store directory (the default: `--store-dir`).
    Dir(PathBuf),
}

impl StoreSpec {
    /// Parse a `--store` value: a directory path. A URL (`scheme://`) names a backend this
    /// build does not have, and is refused rather than taken for a directory name.
    ///
    /// # Errors
    /// A message naming the value's scheme, or an empty value.
    pub fn parse(s: &str) -> Result<StoreSpec, String> {
        if s.is_empty() {
            return Err("--store: empty value (give a store directory)".into());
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(format!(
                "--store: {scheme}:// stores are not supported by this build; give a store directory"
            ));
        }
        Ok(StoreSpec::Dir(PathBuf::from(s)))
    }

    /// The store directory, for a directory store.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            StoreSpec::Dir(d) => Some(d),
        }
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Dir(d) => write!(f, "{}", d.display()),
        }
    }
}

/// Open the store `spec` names (blocking: call it from a blocking task in async code).
/// With the `failpoints` feature, a directory store also gets the persist-failure watcher
/// (`crate::failpoint::watch_persist_failures`).
///
/// # Errors
/// The backend's open error (`Locked`, `Missing`, `SchemaTooNew`, `Corrupt`, ...).
pub fn open_store(spec: &StoreSpec, opts: OpenOptions) -> Result<SharedStore, StoreError> {
    match spec {
        StoreSpec::Dir(dir) => {
            let store = relay_keyspace::Store::open(dir, opts)?;
            crate::failpoint::watch_persist_failures(&store);
            Ok(Arc::new(store))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_a_directory_store_and_a_url_is_refused() {
        assert_eq!(
            StoreSpec::parse("./relay-data").unwrap(),
            StoreSpec::Dir(PathBuf::from("./relay-data"))
        );
        let e = StoreSpec::parse("postgres://relay@db/relay").unwrap_err();
        assert!(e.contains("postgres://"), "{e}");
        assert!(StoreSpec::parse("").is_err());
    }
}
