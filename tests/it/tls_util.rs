//! Support for the TLS tests: a test CA and leaf certificates made with rcgen at run time
//! (written as owner-only PEM files), a rustls client that trusts one CA, one HTTP exchange on a
//! kept-alive TLS connection, and the serial number of the leaf certificate a relay served.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SerialNumber};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::common::{parse_response, Response};

/// A client TLS connection to a relay.
pub(crate) type TlsConn = StreamOwned<ClientConnection, TcpStream>;

/// A certificate authority made for one test.
pub(crate) struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub der: CertificateDer<'static>,
    pub pem: String,
}

/// A leaf certificate for `localhost` and 127.0.0.1, and its key.
pub(crate) struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    /// The serial number as given to rcgen (big-endian, no leading zero byte).
    pub serial: Vec<u8>,
}

impl Ca {
    /// A fresh CA named `name`.
    pub(crate) fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            der: cert.der().clone(),
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf for `localhost` / 127.0.0.1 with this serial number (1 to 2^63).
    pub(crate) fn leaf(&self, serial: u64) -> Leaf {
        self.leaf_with(serial, |_| {})
    }

    /// [`Ca::leaf`], valid until the start of `(year, month, day)` UTC.
    pub(crate) fn leaf_until(&self, serial: u64, (y, m, d): (i32, u8, u8)) -> Leaf {
        self.leaf_with(serial, |p| p.not_after = rcgen::date_time_ymd(y, m, d))
    }

    fn leaf_with(&self, serial: u64, adjust: impl FnOnce(&mut CertificateParams)) -> Leaf {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let bytes: Vec<u8> = serial
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        assert!(
            !bytes.is_empty() && bytes[0] < 0x80,
            "a small positive serial"
        );
        params.serial_number = Some(SerialNumber::from_slice(&bytes));
        params
            .distinguished_name
            .push(DnType::CommonName, format!("relay {serial}"));
        adjust(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            serial: bytes,
        }
    }

    /// Write the CA certificate as `dir/NAME` and return its path.
    pub(crate) fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, &self.pem).unwrap();
        p
    }
}

impl Leaf {
    /// Write (or replace, atomically) `dir/cert.pem` and `dir/key.pem`, both mode 0600.
    pub(crate) fn write(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        replace(&cert, self.cert_pem.as_bytes());
        replace(&key, self.key_pem.as_bytes());
        (cert, key)
    }
}

/// Replace `path` with `bytes` (mode 0600) by a rename, as a certificate tool would.
pub(crate) fn replace(path: &Path, bytes: &[u8]) {
    replace_with_mode(path, bytes, 0o600);
}

/// [`replace`], the new file having `mode` from the start.
pub(crate) fn replace_with_mode(path: &Path, bytes: &[u8], mode: u32) {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
    chmod(&tmp, mode);
    std::fs::rename(&tmp, path).unwrap();
}

/// Set a file's permission bits.
pub(crate) fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A client configuration that trusts `ca` alone (ring provider, ALPN `http/1.1`).
pub(crate) fn client_config(ca: &Ca) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// Connect to `addr` as `localhost` and finish the handshake; `Err` says why it failed.
pub(crate) fn connect(addr: SocketAddr, cfg: &Arc<ClientConfig>) -> Result<TlsConn, String> {
    connect_over(TcpStream::connect(addr).map_err(|e| e.to_string())?, cfg)
}

/// [`connect`] over a connection already open (e.g. from a chosen source address).
pub(crate) fn connect_over(tcp: TcpStream, cfg: &Arc<ClientConfig>) -> Result<TlsConn, String> {
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let conn = ClientConnection::new(cfg.clone(), name).map_err(|e| e.to_string())?;
    let mut s = StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn
            .complete_io(&mut s.sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    Ok(s)
}

/// Send `raw` request bytes and read one response (its length known from Content-Length).
pub(crate) fn exchange(s: &mut TlsConn, raw: &[u8]) -> Result<Response, String> {
    s.write_all(raw).map_err(|e| e.to_string())?;
    s.flush().map_err(|e| e.to_string())?;
    read_response(s)
}

/// Read one response from a kept-alive connection.
pub(crate) fn read_response(s: &mut TlsConn) -> Result<Response, String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Err(format!("closed after {} bytes", out.len())),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
        if let Ok(r) = parse_response(&out) {
            return Ok(r);
        }
        assert!(out.len() < 1 << 20, "response too large");
    }
}

/// `GET path` on a kept-alive TLS connection.
pub(crate) fn get(s: &mut TlsConn, path: &str) -> Result<Response, String> {
    exchange(
        s,
        format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n").as_bytes(),
    )
}

/// The serial number of the leaf certificate the server presented (big-endian, as encoded).
pub(crate) fn served_serial(s: &TlsConn) -> Vec<u8> {
    let leaf = &s.conn.peer_certificates().expect("a server certificate")[0];
    serial_of(leaf.as_ref())
}

/// The serial number of a DER certificate: Certificate ::= SEQUENCE { tbs SEQUENCE {
/// [0] version OPTIONAL, serialNumber INTEGER, ... } ... }.
pub(crate) fn serial_of(der: &[u8]) -> Vec<u8> {
    let (tag, cert, _) = der_item(der);
    assert_eq!(tag, 0x30, "certificate is a SEQUENCE");
    let (tag, tbs, _) = der_item(cert);
    assert_eq!(tag, 0x30, "tbsCertificate is a SEQUENCE");
    let (mut tag, mut content, mut rest) = der_item(tbs);
    if tag == 0xa0 {
        (tag, content, rest) = der_item(rest);
    }
    let _ = rest;
    assert_eq!(tag, 0x02, "serialNumber is an INTEGER");
    content.iter().copied().skip_while(|b| *b == 0).collect()
}

/// One DER item: (tag, content, what follows).
fn der_item(b: &[u8]) -> (u8, &[u8], &[u8]) {
    let tag = b[0];
    let (len, head) = match b[1] {
        n if n < 0x80 => (n as usize, 2),
        n => {
            let k = (n & 0x7f) as usize;
            let len = b[2..2 + k]
                .iter()
                .fold(0usize, |acc, x| (acc << 8) | *x as usize);
            (len, 2 + k)
        }
    };
    (tag, &b[head..head + len], &b[head + len..])
}

/// Send a signal to a process.
pub(crate) fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a child's pid; no memory is shared.
    #[allow(unsafe_code)]
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill({pid}, {sig})");
}
