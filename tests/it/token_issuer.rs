//! A local accounts issuer for the account-token tests (spec §8): an HTTPS server started by the
//! test on loopback, its certificate from a CA made at run time, serving a JWKS the test rotates
//! and breaks, and the issuer's Ed25519 keys that mint access tokens with the claims the
//! accounts service sends. It counts the key-set fetches it answered.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use relay_wire::cloud_key::{certificate, thumbprint};
use relay_wire::keys::{unb64, SigningKey};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::{json, Value};

use crate::common::now_ms;
use crate::tls_util::Ca;

/// The issuer URL the tokens carry (`iss`).
pub(crate) const ISSUER: &str = "https://accounts.test";
/// The relay URL the tokens are for (`aud`).
pub(crate) const AUDIENCE: &str = "https://relay.test";

/// One signing key of the issuer.
pub(crate) struct IssuerKey {
    pub(crate) kid: String,
    pub(crate) key: SigningKey,
}

impl IssuerKey {
    pub(crate) fn new(kid: &str) -> IssuerKey {
        IssuerKey {
            kid: kid.to_string(),
            key: SigningKey::generate(),
        }
    }

    /// Its public JWK.
    pub(crate) fn jwk(&self) -> Value {
        json!({"kty":"OKP","crv":"Ed25519","use":"sig","alg":"EdDSA","kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(self.key.public())})
    }

    /// A compact EdDSA token with these claims.
    pub(crate) fn mint(&self, claims: &Value) -> String {
        let header = json!({"alg":"EdDSA","typ":"at+jwt","kid": self.kid});
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = unb64(&self.key.sign(signed.as_bytes())).expect("signature");
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig))
    }
}

/// The claims of a good 10-minute token for a host whose cloud key is `cloud`.
pub(crate) fn claims(cloud: &SigningKey, account: &str) -> Value {
    let now = now_ms() as u64 / 1000;
    json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": "host-1", "account": account, "org": "org-1",
        "cnf": {"jkt": thumbprint(&cloud.public())}, "client_id": "client-1",
        "iat": now, "exp": now + 600, "jti": format!("jti-{}", rand::random::<u64>()),
    })
}

/// The enrol `proof` of a host: `token`, and the certificate of `cloud` signed by `signer`
/// (the host key, unless a test forges it) naming `host_pub`.
pub(crate) fn proof(
    host_pub: &[u8; 32],
    signer: &SigningKey,
    cloud: &SigningKey,
    token: &str,
) -> Value {
    let cert = certificate(host_pub, &cloud.public(), AUDIENCE, now_ms() as u64 / 1000);
    let sig = signer.sign_canonical(&cert);
    json!({"token": token, "cloud_cert": cert, "cloud_cert_sig": sig})
}

/// What the server answers at the key-set URL.
pub(crate) enum Serving {
    /// `200` with this key set.
    Keys(Vec<Value>),
    /// `503`: the issuer is down.
    Down,
}

/// The running issuer.
pub(crate) struct Issuer {
    pub(crate) addr: SocketAddr,
    pub(crate) ca_file: PathBuf,
    serving: Arc<Mutex<Serving>>,
    fetches: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Issuer {
    /// Start serving `keys` over HTTPS on a free loopback port; the CA goes to `dir`.
    pub(crate) fn start(dir: &Path, keys: Vec<Value>) -> Issuer {
        let ca = Ca::new("issuer test CA");
        let leaf = ca.leaf(1);
        let ca_file = ca.write(dir, "issuer-ca.pem");
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = Arc::new(
            ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let serving = Arc::new(Mutex::new(Serving::Keys(keys)));
        let fetches = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, f, st) = (serving.clone(), fetches.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(tcp) = conn else { continue };
                let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
                let Ok(tls) = ServerConnection::new(config.clone()) else {
                    continue;
                };
                answer(StreamOwned::new(tls, tcp), &s, &f);
            }
        });
        Issuer {
            addr,
            ca_file,
            serving,
            fetches,
            stop,
        }
    }

    /// The key-set URL.
    pub(crate) fn jwks_url(&self) -> String {
        format!("https://localhost:{}/jwks", self.addr.port())
    }

    /// Serve this from now on.
    pub(crate) fn serve(&self, what: Serving) {
        *self.serving.lock().unwrap() = what;
    }

    /// Key-set fetches answered so far (successful or not).
    pub(crate) fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    /// The relay flags of a relay trusting this issuer, with these key-set timings.
    pub(crate) fn relay_args(&self, refresh: &str, cache_life: &str, retry: &str) -> Vec<String> {
        [
            "--enrol-authority",
            "account-tokens",
            "--token-issuer",
            ISSUER,
            "--token-audience",
            AUDIENCE,
            "--token-jwks-url",
            &self.jwks_url(),
            "--token-issuer-ca",
            self.ca_file.to_str().unwrap(),
            "--token-jwks-refresh",
            refresh,
            "--token-jwks-cache-life",
            cache_life,
            "--token-jwks-retry",
            retry,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

/// Read one request and answer it from `serving`.
fn answer(
    mut s: StreamOwned<ServerConnection, std::net::TcpStream>,
    serving: &Mutex<Serving>,
    fetches: &AtomicUsize,
) {
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
        if req.len() > 64 * 1024 {
            return;
        }
    }
    fetches.fetch_add(1, Ordering::SeqCst);
    let (status, body) = match &*serving.lock().unwrap() {
        Serving::Keys(keys) => ("200 OK", json!({ "keys": keys }).to_string()),
        Serving::Down => ("503 Service Unavailable", "down".to_string()),
    };
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.flush();
    s.conn.send_close_notify();
    let _ = s.conn.complete_io(&mut s.sock);
}
