//! `serve --store` / `MBX_RELAY_STORE` (issue 17): a directory names the store and takes the
//! place of `--store-dir`; a `scheme://` value this build has no backend for is refused at
//! start, by name, before anything is created.
use crate::common;

use common::*;

#[test]
fn a_store_directory_takes_the_place_of_the_store_dir() {
    let elsewhere = tempfile::tempdir().unwrap();
    let data = elsewhere.path().join("data");
    let relay =
        Relay::launch(RelayOpts::args(&["--store", data.to_str().unwrap()])).expect("relay starts");
    let h = Host::new("flagged");
    h.enrol(&relay);
    relay.assert_alive();
    for f in ["db", "relay.key", "relay.lock", "admin.sock"] {
        assert!(data.join(f).exists(), "{f} is in the --store directory");
    }
    assert!(
        !relay.store_dir().join("db").exists(),
        "nothing written to the overridden --store-dir"
    );
    // relay-tool reaches the running relay through that directory.
    let out = relay_tool(&["stats", "--store-dir", data.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_environment_variable_names_the_store_too() {
    let elsewhere = tempfile::tempdir().unwrap();
    let data = elsewhere.path().join("from-env");
    let relay = Relay::launch(RelayOpts::default().env("MBX_RELAY_STORE", data.to_str().unwrap()))
        .expect("relay starts");
    relay.assert_alive();
    assert!(data.join("db").exists());
}

#[test]
fn a_url_store_of_an_unknown_scheme_is_refused_at_start_naming_its_scheme() {
    let err = Relay::launch(RelayOpts::args(&[
        "--store",
        "mysql://relay@127.0.0.1:1/relay",
    ]))
    .err()
    .expect("refused");
    assert!(err.contains("mysql:// stores are not supported"), "{err}");
    assert!(err.contains("postgres://"), "says what is taken: {err}");
}

#[test]
fn an_unreachable_postgres_store_is_refused_at_start_without_its_password() {
    let err = Relay::launch(RelayOpts::args(&[
        "--store",
        "postgres://relay:s3cret-pw@127.0.0.1:1/relay",
    ]))
    .err()
    .expect("refused");
    assert!(
        err.contains("cannot open store postgres://127.0.0.1:1/relay"),
        "{err}"
    );
    assert!(!err.contains("s3cret-pw"), "password in the error: {err}");
    // The client's cause, not only "error connecting to server" (issue 39).
    assert!(
        err.contains("error connecting to server: ") && err.contains("refused"),
        "{err}"
    );
}
