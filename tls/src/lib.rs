//! TLS of agenthooks' ports, one mechanism for both binaries (CONTRACT §9.4).
//!
//! - [`ServerCert`]: a server certificate and key read from PEM files (a kubelet-mounted
//!   Secret, cert-manager's or the chart's), re-read every [`RELOAD_INTERVAL`]: a new
//!   valid pair is served to the next handshake; a bad one (unreadable, not PEM, a key
//!   that does not belong to the certificate) is logged as an error once and the
//!   previous pair stays in service.
//! - [`Incoming`]: the accept side of a port, plain TCP or TLS. TLS handshakes run side
//!   by side (the `tls-listener` crate), each bounded by [`HANDSHAKE_TIMEOUT`], so a
//!   slow or failing client never holds up another connection. It is an
//!   [`axum::serve::Listener`], so `axum::serve` (graceful shutdown included) runs on it
//!   unchanged.
//! - [`client_config_trusting`]: a rustls client configuration that trusts the
//!   certificates of one CA bundle file and nothing else (no system roots).
//!
//! Every error names the flag that gave the file and says what was wrong with it.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;

/// How often [`ServerCert::spawn_reloader`] looks at the files. A kubelet updates a
/// mounted Secret within about a minute of its change; cert-manager renews well before
/// expiry: 10 s adds little to either and costs two small reads.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// Longest a client may take to finish its TLS handshake before its connection is
/// dropped (other connections are accepted and served meanwhile).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A PEM file could not be used. Each variant names the flag that gave the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read.
    #[error("{flag} {path}: cannot read the file: {source}")]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// No certificate in a file that must hold at least one.
    #[error("{flag} {path}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate { flag: &'static str, path: PathBuf },
    /// A certificate section that does not decode, or one a CA bundle cannot hold.
    #[error("{flag} {path}: a certificate cannot be used: {reason}")]
    BadCertificate {
        flag: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// No usable private key.
    #[error("{flag} {path}: holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {reason}")]
    BadKey {
        flag: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// The key does not belong to the certificate.
    #[error("{key_flag} does not hold the private key of the certificate in {cert_flag}: {reason}")]
    Mismatch {
        cert_flag: &'static str,
        key_flag: &'static str,
        reason: String,
    },
    /// rustls refused the configuration (a bug or an unsupported provider).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Where a server's certificate chain and private key are, and the flags that named them
/// (for errors and logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemFiles {
    /// The certificate chain, leaf first (e.g. a Secret's `tls.crt`).
    pub cert: PathBuf,
    /// The private key of the leaf (e.g. a Secret's `tls.key`).
    pub key: PathBuf,
    /// The flag that gave [`PemFiles::cert`], e.g. `--sync-tls-cert-file`.
    pub cert_flag: &'static str,
    /// The flag that gave [`PemFiles::key`], e.g. `--sync-tls-key-file`.
    pub key_flag: &'static str,
}

/// Both flags of a pair, or neither.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given} is set but {missing} is not: give both (TLS) or neither (plain HTTP)")]
pub struct HalfPair {
    /// The flag that was given.
    pub given: &'static str,
    /// The flag that is missing.
    pub missing: &'static str,
}

impl PemFiles {
    /// The pair from two optional flag values: `Some` when both are given, `None` when
    /// neither is. Errors: [`HalfPair`] naming the missing flag when only one is.
    pub fn from_flags(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        cert_flag: &'static str,
        key_flag: &'static str,
    ) -> Result<Option<PemFiles>, HalfPair> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(PemFiles {
                cert,
                key,
                cert_flag,
                key_flag,
            })),
            (None, None) => Ok(None),
            (Some(_), None) => Err(HalfPair {
                given: cert_flag,
                missing: key_flag,
            }),
            (None, Some(_)) => Err(HalfPair {
                given: key_flag,
                missing: cert_flag,
            }),
        }
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

fn certificates(
    flag: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertificate {
            flag,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            flag,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The certificate chain and key of `files`, checked to belong together.
///
/// Errors: [`TlsError`] naming the flag of the file that cannot be used.
pub fn load_pair(files: &PemFiles) -> Result<CertifiedKey, TlsError> {
    let cert_pem = read(files.cert_flag, &files.cert)?;
    let key_pem = read(files.key_flag, &files.key)?;
    pair_from_pem(files, &cert_pem, &key_pem)
}

fn pair_from_pem(
    files: &PemFiles,
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<CertifiedKey, TlsError> {
    let chain = certificates(files.cert_flag, &files.cert, cert_pem)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::BadKey {
        flag: files.key_flag,
        path: files.key.clone(),
        reason: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| TlsError::Mismatch {
        cert_flag: files.cert_flag,
        key_flag: files.key_flag,
        reason: e.to_string(),
    })
}

/// A server certificate read from [`PemFiles`], served to every handshake, replaced when
/// the files change to a valid new pair ([`ServerCert::reload`]).
pub struct ServerCert {
    files: PemFiles,
    current: RwLock<Arc<CertifiedKey>>,
    /// The bytes of (cert, key) last looked at, valid or not: a change is acted on once.
    seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for ServerCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerCert")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServerCert {
    /// Reads the pair once. Errors: [`TlsError`] when it cannot be used (start-up fails).
    pub fn load(files: PemFiles) -> Result<Arc<ServerCert>, TlsError> {
        let cert_pem = read(files.cert_flag, &files.cert)?;
        let key_pem = read(files.key_flag, &files.key)?;
        let pair = pair_from_pem(&files, &cert_pem, &key_pem)?;
        Ok(Arc::new(ServerCert {
            files,
            current: RwLock::new(Arc::new(pair)),
            seen: Mutex::new((cert_pem, key_pem)),
        }))
    }

    /// The files this certificate comes from.
    pub fn files(&self) -> &PemFiles {
        &self.files
    }

    /// The pair served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads the files again. `Ok(true)`: they changed and the new pair is served from
    /// the next handshake on; `Ok(false)`: unchanged since the last look (also when the
    /// last look found a bad pair: it is reported once). Errors: [`TlsError`] when the
    /// changed files cannot be used; the previous pair stays in service.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let cert_pem = read(self.files.cert_flag, &self.files.cert)?;
        let key_pem = read(self.files.key_flag, &self.files.key)?;
        {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.0 == cert_pem && seen.1 == key_pem {
                return Ok(false);
            }
            *seen = (cert_pem.clone(), key_pem.clone());
        }
        let pair = pair_from_pem(&self.files, &cert_pem, &key_pem)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(pair);
        Ok(true)
    }

    /// Calls [`ServerCert::reload`] every `every` until `cancel`, logging a new pair
    /// (info) and a bad one (error, the previous pair kept). `what` names the port in
    /// the logs (`sync`, `dispatch`).
    pub fn spawn_reloader(
        self: &Arc<Self>,
        what: &'static str,
        every: Duration,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tick.tick() => {}
                }
                match me.reload() {
                    Ok(true) => tracing::info!(
                        port = what,
                        cert = %me.files.cert.display(),
                        "TLS certificate changed on disk: serving the new one"
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::error!(
                        port = what,
                        error = %e,
                        "TLS certificate files changed but cannot be used: still serving the previous certificate"
                    ),
                }
            }
        })
    }

    /// A rustls server configuration (ring, TLS 1.2 and 1.3, no client certificates,
    /// ALPN `http/1.1`) that serves [`ServerCert::current`] to each handshake.
    ///
    /// Errors: [`TlsError::Config`] if rustls refuses it.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for ServerCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A rustls client configuration (ring) that trusts only the certificates in the PEM
/// bundle at `path` (given by `flag`): not the system's roots. Host names are checked
/// against the certificate's subject alternative names as usual.
///
/// Errors: [`TlsError`] naming `flag` when the file cannot be read, holds no
/// certificate, or holds one that cannot be a trust anchor.
pub fn client_config_trusting(flag: &'static str, path: &Path) -> Result<ClientConfig, TlsError> {
    let pem = read(flag, path)?;
    let mut roots = RootCertStore::empty();
    for cert in certificates(flag, path, &pem)? {
        roots.add(cert).map_err(|e| TlsError::BadCertificate {
            flag,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    }
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A TLS connection of an [`Incoming`] port.
pub type TlsStream = tokio_rustls::server::TlsStream<TcpStream>;

/// The accept side of a port: plain TCP, or TLS with handshakes run side by side.
pub enum Incoming {
    /// Plain HTTP.
    Plain(TcpListener),
    /// TLS (boxed: the listener holds its pending handshakes).
    Tls(Box<tls_listener::TlsListener<TcpListener, TlsAcceptor>>),
}

impl fmt::Debug for Incoming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Incoming::Plain(_) => "Plain",
            Incoming::Tls(_) => "Tls",
        };
        f.debug_struct("Incoming")
            .field("kind", &kind)
            .field("addr", &self.local_addr().ok())
            .finish()
    }
}

impl Incoming {
    /// `listener` as a TLS port serving `config`; each handshake is bounded by
    /// [`HANDSHAKE_TIMEOUT`].
    pub fn tls(listener: TcpListener, config: Arc<ServerConfig>) -> Incoming {
        let listener = tls_listener::builder(TlsAcceptor::from(config))
            .handshake_timeout(HANDSHAKE_TIMEOUT)
            .listen(listener);
        Incoming::Tls(Box::new(listener))
    }

    /// `listener` plain, or TLS with `cert` when given.
    ///
    /// Errors: [`TlsError::Config`] if rustls refuses the configuration.
    pub fn new(
        listener: TcpListener,
        cert: Option<&Arc<ServerCert>>,
    ) -> Result<Incoming, TlsError> {
        Ok(match cert {
            Some(cert) => Incoming::tls(listener, cert.server_config()?),
            None => Incoming::Plain(listener),
        })
    }

    /// Whether the port speaks TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Incoming::Tls(_))
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Incoming::Plain(l) => l.local_addr(),
            Incoming::Tls(l) => l.listener().local_addr(),
        }
    }

    /// The next connection (TLS: once its handshake completed), with `TCP_NODELAY` set.
    /// Never fails: a failed handshake is logged (warn, with the peer and the reason) and
    /// skipped; an accept error (e.g. out of file descriptors) is logged and retried
    /// after a short pause.
    pub async fn accept_next(&mut self) -> (Either<TcpStream, TlsStream>, SocketAddr) {
        loop {
            match self {
                Incoming::Plain(l) => match l.accept().await {
                    Ok((stream, addr)) => {
                        let _ = stream.set_nodelay(true);
                        return (Either::Left(stream), addr);
                    }
                    Err(e) => accept_failed(e).await,
                },
                Incoming::Tls(l) => match l.accept().await {
                    Ok((stream, addr)) => {
                        let _ = stream.get_ref().0.set_nodelay(true);
                        return (Either::Right(stream), addr);
                    }
                    Err(tls_listener::Error::ListenerError(e)) => accept_failed(e).await,
                    Err(tls_listener::Error::TlsAcceptError {
                        error, peer_addr, ..
                    }) => {
                        tracing::warn!(peer = %peer_addr, error = %error, "TLS handshake failed");
                    }
                    Err(tls_listener::Error::HandshakeTimeout { peer_addr, .. }) => {
                        tracing::warn!(peer = %peer_addr, timeout_seconds = HANDSHAKE_TIMEOUT.as_secs(), "TLS handshake timed out");
                    }
                    Err(e) => tracing::warn!(error = %e, "TLS accept failed"),
                },
            }
        }
    }
}

async fn accept_failed(e: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

impl axum::serve::Listener for Incoming {
    type Io = Either<TcpStream, TlsStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.accept_next().await
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Incoming::local_addr(self)
    }
}

#[cfg(test)]
mod tests;
