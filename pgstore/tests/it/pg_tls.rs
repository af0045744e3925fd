//! TLS to PostgreSQL: a throwaway cluster with `ssl=on`, its certificate (for `localhost`)
//! issued by a CA made here with `openssl`. `verify-full` with that CA connects and every
//! session of the store shows TLS in `pg_stat_ssl`; another CA is refused; a host name the
//! certificate does not name (`127.0.0.1`) is refused under `verify-full` and accepted under
//! `verify-ca` (libpq's rules).

use std::path::Path;
use std::process::Command;

use relay_pgstore::PgStore;
use relay_store::OpenOptions;
use relay_testkit::cluster::{bindir_or_skip, PgCluster};

/// Run `openssl args` in `dir`; panics with its stderr when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed CA `NAME.pem` / `NAME.key` (P-256) in `dir`.
fn ca(dir: &Path, name: &str) {
    let (pem, key, cn) = (
        format!("{name}.pem"),
        format!("{name}.key"),
        format!("/CN={name}"),
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "2",
            "-subj",
            &cn,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    );
}

/// `server.pem` / `server.key` for DNS name `localhost` only, issued by CA `ca` in `dir`.
fn server_cert(dir: &Path, ca: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=DNS:localhost\n").expect("ext file");
    let (pem, key) = (format!("{ca}.pem"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &pem,
            "-CAkey",
            &key,
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
}

/// Open a store on `host` of `pg`'s database `db` with these TLS parameters.
fn open(pg: &PgCluster, host: &str, db: &str, tls: &str) -> Result<PgStore, String> {
    let url = format!("postgres://postgres@{host}:{}/{db}?{tls}", pg.port());
    PgStore::open(&url, OpenOptions::default()).map_err(|e| e.to_string())
}

#[test]
fn verified_tls_connects_and_a_wrong_ca_or_host_name_is_refused() {
    let Some(bindir) = bindir_or_skip("pg_tls") else {
        return;
    };
    let certs = tempfile::tempdir().expect("temp dir");
    let dir = certs.path();
    ca(dir, "ca");
    ca(dir, "other");
    server_cert(dir, "ca");
    let pg = PgCluster::start_with_tls(&bindir, &dir.join("server.pem"), &dir.join("server.key"))
        .expect("a cluster with ssl=on");
    let db = pg.fresh_db_name();
    let root = |name: &str| format!("sslrootcert={}", dir.join(format!("{name}.pem")).display());

    let store = open(
        &pg,
        "localhost",
        &db,
        &format!("sslmode=verify-full&{}", root("ca")),
    )
    .expect("verify-full with the right CA");
    let sessions = |ssl: bool| {
        pg.sql(&format!(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'mbx-relay' AND s.ssl = {ssl}"
        ))
        .expect("pg_stat_ssl")
    };
    assert_ne!(sessions(true), "0", "the store's sessions use TLS");
    assert_eq!(sessions(false), "0", "no session of the store is plaintext");
    drop(store);

    let err = open(
        &pg,
        "localhost",
        &db,
        &format!("sslmode=verify-full&{}", root("other")),
    )
    .err()
    .expect("a server certificate from another CA must be refused");
    assert!(err.contains("TLS handshake"), "{err}");
    let err = open(
        &pg,
        "127.0.0.1",
        &db,
        &format!("sslmode=verify-full&{}", root("ca")),
    )
    .err()
    .expect("a host name the certificate does not name must be refused under verify-full");
    assert!(err.contains("TLS handshake"), "{err}");
    open(
        &pg,
        "127.0.0.1",
        &db,
        &format!("sslmode=verify-ca&{}", root("ca")),
    )
    .expect("verify-ca checks the chain, not the name");
    let err = open(
        &pg,
        "127.0.0.1",
        &db,
        &format!("sslmode=verify-ca&{}", root("other")),
    )
    .err()
    .expect("verify-ca refuses another CA");
    assert!(!err.is_empty());
}
