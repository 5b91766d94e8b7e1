use super::*;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A CA: its PEM and an issuer that signs leaves.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// (cert PEM, key PEM) of a leaf for `names` signed by `ca`, with `cn` as common name.
fn leaf(ca: &Ca, cn: &str, names: &[&str]) -> (String, String) {
    let mut params =
        CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn files(dir: &Path) -> PemFiles {
    PemFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        cert_flag: "--sync-tls-cert-file",
        key_flag: "--sync-tls-key-file",
    }
}

fn write(files: &PemFiles, (cert, key): &(String, String)) {
    std::fs::write(&files.cert, cert).unwrap();
    std::fs::write(&files.key, key).unwrap();
}

/// The subject common name of the pair served now, as the DER holds it.
fn served_cn(cert: &ServerCert, cn_a: &str, cn_b: &str) -> String {
    let der = cert.current().cert[0].to_vec();
    let has = |s: &str| der.windows(s.len()).any(|w| w == s.as_bytes());
    match (has(cn_a), has(cn_b)) {
        (true, false) => cn_a.to_string(),
        (false, true) => cn_b.to_string(),
        other => panic!("cannot tell the served certificate: {other:?}"),
    }
}

#[test]
fn flags_come_in_pairs() {
    let p = |s: &str| Some(PathBuf::from(s));
    assert_eq!(
        PemFiles::from_flags(None, None, "--tls-cert-file", "--tls-key-file"),
        Ok(None)
    );
    assert!(
        PemFiles::from_flags(p("c"), p("k"), "--tls-cert-file", "--tls-key-file")
            .unwrap()
            .is_some()
    );
    let e = PemFiles::from_flags(p("c"), None, "--tls-cert-file", "--tls-key-file").unwrap_err();
    assert_eq!((e.given, e.missing), ("--tls-cert-file", "--tls-key-file"));
    assert_eq!(
        e.to_string(),
        "--tls-cert-file is set but --tls-key-file is not: give both (TLS) or neither (plain HTTP)"
    );
    let e = PemFiles::from_flags(None, p("k"), "--tls-cert-file", "--tls-key-file").unwrap_err();
    assert_eq!(e.missing, "--tls-cert-file");
}

#[test]
fn load_errors_name_the_flag_and_the_fault() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let e = ServerCert::load(f.clone()).unwrap_err();
    assert!(
        matches!(
            e,
            TlsError::Read {
                flag: "--sync-tls-cert-file",
                ..
            }
        ),
        "{e}"
    );

    let ca = ca("ca");
    let (cert, key) = leaf(&ca, "op", &["localhost"]);
    std::fs::write(&f.cert, "not pem").unwrap();
    std::fs::write(&f.key, &key).unwrap();
    let e = ServerCert::load(f.clone()).unwrap_err();
    assert!(
        matches!(
            e,
            TlsError::NoCertificate {
                flag: "--sync-tls-cert-file",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().starts_with("--sync-tls-cert-file "), "{e}");

    std::fs::write(&f.cert, &cert).unwrap();
    std::fs::write(&f.key, &cert).unwrap();
    let e = ServerCert::load(f.clone()).unwrap_err();
    assert!(
        matches!(
            e,
            TlsError::BadKey {
                flag: "--sync-tls-key-file",
                ..
            }
        ),
        "{e}"
    );

    // A key of another certificate.
    let (_, other_key) = leaf(&ca, "other", &["localhost"]);
    std::fs::write(&f.key, &other_key).unwrap();
    let e = ServerCert::load(f.clone()).unwrap_err();
    assert!(matches!(e, TlsError::Mismatch { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("--sync-tls-key-file does not hold the private key of the certificate in --sync-tls-cert-file"),
        "{e}"
    );

    std::fs::write(&f.key, &key).unwrap();
    assert!(ServerCert::load(f).is_ok());
}

#[test]
fn reload_picks_up_a_new_pair_and_keeps_the_old_on_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let ca = ca("ca");
    write(&f, &leaf(&ca, "first-cn", &["localhost"]));
    let cert = ServerCert::load(f.clone()).unwrap();
    assert_eq!(served_cn(&cert, "first-cn", "second-cn"), "first-cn");
    assert!(!cert.reload().unwrap(), "unchanged files: nothing to do");

    // Rotated (cert-manager renewed, kubelet updated the mount).
    write(&f, &leaf(&ca, "second-cn", &["localhost"]));
    assert!(cert.reload().unwrap());
    assert_eq!(served_cn(&cert, "first-cn", "second-cn"), "second-cn");

    // Half written: a new certificate with the old key. Refused, the old pair serves on,
    // and the same bad files are reported once.
    let (third, _) = leaf(&ca, "first-cn", &["localhost"]);
    std::fs::write(&f.cert, third).unwrap();
    assert!(matches!(cert.reload(), Err(TlsError::Mismatch { .. })));
    assert_eq!(served_cn(&cert, "first-cn", "second-cn"), "second-cn");
    assert!(!cert.reload().unwrap());
    assert_eq!(served_cn(&cert, "first-cn", "second-cn"), "second-cn");

    // Garbage, then a file that went away: still the second pair.
    std::fs::write(&f.key, "garbage").unwrap();
    assert!(matches!(cert.reload(), Err(TlsError::BadKey { .. })));
    std::fs::remove_file(&f.key).unwrap();
    assert!(matches!(cert.reload(), Err(TlsError::Read { .. })));
    assert_eq!(served_cn(&cert, "first-cn", "second-cn"), "second-cn");

    // A good pair again.
    write(&f, &leaf(&ca, "first-cn", &["localhost"]));
    assert!(cert.reload().unwrap());
    assert_eq!(served_cn(&cert, "first-cn", "second-cn"), "first-cn");
}

#[test]
fn a_ca_bundle_needs_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.crt");
    let e = client_config_trusting("--operator-ca-file", &path).unwrap_err();
    assert!(e.to_string().starts_with("--operator-ca-file "), "{e}");
    std::fs::write(&path, "").unwrap();
    let e = client_config_trusting("--operator-ca-file", &path).unwrap_err();
    assert!(
        matches!(
            e,
            TlsError::NoCertificate {
                flag: "--operator-ca-file",
                ..
            }
        ),
        "{e}"
    );
    let a = ca("a");
    let b = ca("b");
    std::fs::write(&path, format!("{}{}", a.pem, b.pem)).unwrap();
    client_config_trusting("--operator-ca-file", &path).unwrap();
}

/// `GET /` over TLS to `addr` as `host`, trusting `ca_pem` → the response text.
async fn get(addr: SocketAddr, ca_pem: &str, host: &str) -> io::Result<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.crt");
    std::fs::write(&path, ca_pem).unwrap();
    let config = client_config_trusting("--operator-ca-file", &path).unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
    let mut tls = connector.connect(name, tcp).await?;
    tls.write_all(
        format!("GET / HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut out = String::new();
    tls.read_to_string(&mut out).await?;
    Ok(out)
}

#[tokio::test]
async fn serves_over_tls_to_a_client_of_its_ca_only_and_rotates() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let ca_a = ca("ca-a");
    write(&f, &leaf(&ca_a, "op", &["localhost", "127.0.0.1"]));
    let cert = ServerCert::load(f.clone()).unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let incoming = Incoming::new(tcp, Some(&cert)).unwrap();
    assert!(incoming.is_tls());
    let addr = incoming.local_addr().unwrap();
    let cancel = CancellationToken::new();
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello over tls" }));
    let server = tokio::spawn(
        axum::serve(incoming, app)
            .with_graceful_shutdown(cancel.clone().cancelled_owned())
            .into_future(),
    );

    // A client that never finishes its handshake holds up nobody.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled.write_all(b"\x16\x03\x01").await.unwrap();

    let ok = get(addr, &ca_a.pem, "127.0.0.1").await.unwrap();
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.ends_with("hello over tls"), "{ok}");
    let ok = get(addr, &ca_a.pem, "localhost").await.unwrap();
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");

    // Another CA did not sign it: refused with the reason.
    let ca_b = ca("ca-b");
    let e = get(addr, &ca_b.pem, "localhost").await.unwrap_err();
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    // A name the certificate does not hold: refused.
    let e = get(addr, &ca_a.pem, "operator.example").await.unwrap_err();
    assert!(
        e.to_string().contains("certificate not valid for name"),
        "{e}"
    );

    // Rotation to a certificate of CA B: after a reload, B's clients are served and
    // A's are refused.
    write(&f, &leaf(&ca_b, "op", &["localhost"]));
    assert!(cert.reload().unwrap());
    let ok = get(addr, &ca_b.pem, "localhost").await.unwrap();
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(get(addr, &ca_a.pem, "localhost").await.is_err());

    drop(stalled);
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("graceful shutdown")
        .unwrap()
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_reloader_looks_every_interval_until_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let ca = ca("ca");
    write(&f, &leaf(&ca, "first-cn", &["localhost"]));
    let cert = ServerCert::load(f.clone()).unwrap();
    let cancel = CancellationToken::new();
    let task = cert.spawn_reloader("sync", RELOAD_INTERVAL, cancel.clone());
    write(&f, &leaf(&ca, "second-cn", &["localhost"]));
    tokio::time::sleep(RELOAD_INTERVAL / 2).await;
    assert_eq!(served_cn(&cert, "first-cn", "second-cn"), "first-cn");
    tokio::time::sleep(RELOAD_INTERVAL).await;
    assert_eq!(served_cn(&cert, "first-cn", "second-cn"), "second-cn");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn a_plain_port_stays_plain() {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let incoming = Incoming::new(tcp, None).unwrap();
    assert!(!incoming.is_tls());
    assert!(format!("{incoming:?}").contains("Plain"));
}
