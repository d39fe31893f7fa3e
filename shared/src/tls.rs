//! The coordinator's control channel under mutual TLS: where the PEM
//! material comes from, and who a worker's client certificate says it is.
//!
//! # Material
//! [`Pem`] is one PEM input: a file named by a command-line flag (read
//! again whenever the caller asks, so rotated files are picked up) or bytes
//! held in memory (the ephemeral certificates of `run --tls`). Every error
//! names the flag and the file, e.g.
//! `--tls-key /etc/flotilla/tls/tls.key: no private key in the file (PEM
//! "PRIVATE KEY", "RSA PRIVATE KEY" or "EC PRIVATE KEY")`.
//! [`ServerTlsMaterial`] is what the coordinator serves with (its
//! certificate and key, and the CA its workers' certificates must chain
//! to); [`ClientTlsMaterial`] what a worker connects with (the CA that
//! signed the coordinator's certificate, its own certificate and key).
//!
//! # Identity and workload class
//! [`WorkerIdentity::from_certificate`] reads a verified client
//! certificate: the worker's **identity** is the subject's common name,
//! else its first DNS name, else its first URI; the **workload classes** it
//! may serve are named by DNS names (subject alternative names) of the form
//! `<class>.worker.flotilla.internal`, `<class>` being `online`, `batch` or
//! `any` ([`class_dns_name`]). A DNS name, rather than a subject field or a
//! URI, because every issuer an operator has writes one: Helm's
//! `genSignedCert` (which sets nothing but the common name, IPs and DNS
//! names), cert-manager's `dnsNames` and openssl's `subjectAltName`. A
//! certificate naming no class may serve none.
//!
//! # Ephemeral certificates
//! With the `ephemeral` feature, [`ephemeral`] makes a throwaway CA and
//! certificates in memory (rcgen): `flotilla run --tls` / `bench --tls`
//! serve loopback mTLS with them, and tests make good and bad certificates
//! with them.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::WorkloadClass;

/// The DNS-name suffix of workload-class names in worker certificates:
/// `online.worker.flotilla.internal` allows the online pool.
pub const CLASS_NAME_SUFFIX: &str = ".worker.flotilla.internal";

/// The DNS name a worker certificate carries to be allowed `class`
/// (`None`: any class), e.g. `batch.worker.flotilla.internal`.
#[must_use]
pub fn class_dns_name(class: Option<WorkloadClass>) -> String {
    let label = class.map_or("any", WorkloadClass::as_str);
    format!("{label}{CLASS_NAME_SUFFIX}")
}

/// A bad or unreadable TLS input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("{input}: cannot read the file: {message}")]
    Read {
        /// The flag and file (or what the bytes are).
        input: String,
        /// The OS error.
        message: String,
    },
    /// The content is not what it must be (no certificate, no key, bad
    /// PEM, a key that does not match its certificate...).
    #[error("{input}: {message}")]
    Invalid {
        /// The flag and file (or what the bytes are).
        input: String,
        /// What is wrong.
        message: String,
    },
}

/// One PEM input: a file named by a flag, or bytes in memory.
#[derive(Clone, PartialEq, Eq)]
pub enum Pem {
    /// A file, read at each use.
    File {
        /// The command-line flag that named it (`--tls-cert`), for errors.
        flag: String,
        /// The file.
        path: PathBuf,
    },
    /// PEM bytes held in memory.
    Inline {
        /// What they are (`ephemeral CA`), for errors.
        what: String,
        /// The PEM text.
        pem: Arc<[u8]>,
    },
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never prints the bytes: they may be a private key.
        f.write_str(&self.label())
    }
}

impl Pem {
    /// The file `path`, named on the command line by `flag`.
    #[must_use]
    pub fn file(flag: &str, path: impl Into<PathBuf>) -> Self {
        Pem::File {
            flag: flag.to_owned(),
            path: path.into(),
        }
    }

    /// PEM bytes in memory, described as `what` in errors.
    #[must_use]
    pub fn inline(what: &str, pem: impl AsRef<[u8]>) -> Self {
        Pem::Inline {
            what: what.to_owned(),
            pem: Arc::from(pem.as_ref()),
        }
    }

    /// How errors name this input: `--tls-cert /path/tls.crt`.
    #[must_use]
    pub fn label(&self) -> String {
        match self {
            Pem::File { flag, path } => format!("{flag} {}", path.display()),
            Pem::Inline { what, .. } => what.clone(),
        }
    }

    /// The file, if this input is one.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        match self {
            Pem::File { path, .. } => Some(path),
            Pem::Inline { .. } => None,
        }
    }

    fn invalid(&self, message: impl Into<String>) -> TlsError {
        TlsError::Invalid {
            input: self.label(),
            message: message.into(),
        }
    }

    /// The bytes, read now (a file is read again at every call).
    ///
    /// # Errors
    /// [`TlsError::Read`] when the file cannot be read.
    pub fn read(&self) -> Result<Vec<u8>, TlsError> {
        match self {
            Pem::File { path, .. } => std::fs::read(path).map_err(|e| TlsError::Read {
                input: self.label(),
                message: e.to_string(),
            }),
            Pem::Inline { pem, .. } => Ok(pem.to_vec()),
        }
    }

    /// The certificates (`CERTIFICATE` blocks), in order; at least one.
    ///
    /// # Errors
    /// Unreadable, bad PEM, or no certificate.
    pub fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, TlsError> {
        self.parse_certificates(&self.read()?)
    }

    /// The PEM bytes, read now and checked to hold a certificate (for a
    /// consumer that parses them itself, such as tonic).
    ///
    /// # Errors
    /// As [`Pem::certificates`].
    pub fn certificates_pem(&self) -> Result<Vec<u8>, TlsError> {
        let bytes = self.read()?;
        self.parse_certificates(&bytes)?;
        Ok(bytes)
    }

    /// The PEM bytes, read now and checked to hold a private key.
    ///
    /// # Errors
    /// As [`Pem::private_key`].
    pub fn private_key_pem(&self) -> Result<Vec<u8>, TlsError> {
        let bytes = self.read()?;
        self.parse_private_key(&bytes)?;
        Ok(bytes)
    }

    fn parse_certificates(&self, bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
        let certs = CertificateDer::pem_slice_iter(bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.invalid(format!("bad PEM: {e}")))?;
        if certs.is_empty() {
            return Err(self.invalid("no certificate in the file (PEM \"CERTIFICATE\")"));
        }
        Ok(certs)
    }

    /// The first private key (PKCS#8, PKCS#1 or SEC1).
    ///
    /// # Errors
    /// Unreadable, bad PEM, or no key.
    pub fn private_key(&self) -> Result<PrivateKeyDer<'static>, TlsError> {
        self.parse_private_key(&self.read()?)
    }

    fn parse_private_key(&self, bytes: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
        PrivateKeyDer::from_pem_slice(bytes).map_err(|e| match e {
            rustls_pki_types::pem::Error::NoItemsFound => self.invalid(
                "no private key in the file (PEM \"PRIVATE KEY\", \"RSA PRIVATE KEY\" or \
                 \"EC PRIVATE KEY\")",
            ),
            e => self.invalid(format!("bad PEM: {e}")),
        })
    }
}

/// What the coordinator serves mutual TLS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsMaterial {
    /// Its certificate chain (`--tls-cert`), leaf first.
    pub cert: Pem,
    /// The certificate's private key (`--tls-key`).
    pub key: Pem,
    /// The CA(s) a worker's client certificate must chain to
    /// (`--tls-client-ca`).
    pub client_ca: Pem,
}

impl ServerTlsMaterial {
    /// The three files, named by the coordinator's flags.
    #[must_use]
    pub fn files(cert: &Path, key: &Path, client_ca: &Path) -> Self {
        ServerTlsMaterial {
            cert: Pem::file("--tls-cert", cert),
            key: Pem::file("--tls-key", key),
            client_ca: Pem::file("--tls-client-ca", client_ca),
        }
    }

    /// The inputs, in the order above.
    #[must_use]
    pub fn inputs(&self) -> [&Pem; 3] {
        [&self.cert, &self.key, &self.client_ca]
    }
}

/// What a worker connects to a TLS coordinator with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTlsMaterial {
    /// The CA(s) the coordinator's certificate must chain to (`--tls-ca`).
    pub ca: Pem,
    /// The worker's client certificate and key (`--tls-cert`,
    /// `--tls-key`); a coordinator that verifies clients refuses the
    /// handshake without them.
    pub identity: Option<(Pem, Pem)>,
    /// The name to verify the coordinator's certificate against (and send
    /// as SNI) instead of the address's host (`--tls-server-name`).
    pub server_name: Option<String>,
}

/// Who a worker's verified client certificate says it is, and which
/// workload classes it may serve (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerIdentity {
    /// The subject's common name, else the first DNS name, else the first
    /// URI, else `"(unnamed certificate)"`.
    pub name: String,
    /// Allowed to serve the online pool.
    pub online: bool,
    /// Allowed to serve the batch pool.
    pub batch: bool,
}

impl WorkerIdentity {
    /// Reads the end-entity certificate `der` (already verified by the TLS
    /// handshake: this checks nothing about trust).
    ///
    /// # Errors
    /// The certificate does not parse as X.509 v3.
    pub fn from_certificate(der: &CertificateDer<'_>) -> Result<Self, String> {
        let cert = webpki::EndEntityCert::try_from(der)
            .map_err(|e| format!("the client certificate does not parse: {e}"))?;
        let dns: Vec<&str> = cert.valid_dns_names().collect();
        let (mut online, mut batch) = (false, false);
        for name in &dns {
            let lower = name.to_ascii_lowercase();
            match lower.strip_suffix(CLASS_NAME_SUFFIX) {
                Some("online") => online = true,
                Some("batch") => batch = true,
                Some("any") => (online, batch) = (true, true),
                _ => {}
            }
        }
        let name = common_name(cert.subject())
            .or_else(|| dns.first().map(|s| (*s).to_owned()))
            .or_else(|| cert.valid_uri_names().next().map(str::to_owned))
            .unwrap_or_else(|| "(unnamed certificate)".to_owned());
        Ok(WorkerIdentity {
            name,
            online,
            batch,
        })
    }

    /// Whether the certificate allows serving `class`.
    #[must_use]
    pub fn allows(&self, class: WorkloadClass) -> bool {
        match class {
            WorkloadClass::Online => self.online,
            WorkloadClass::Batch => self.batch,
        }
    }

    /// The classes allowed, for messages: `online`, `batch`, `online, batch`
    /// or `none`.
    #[must_use]
    pub fn classes(&self) -> String {
        match (self.online, self.batch) {
            (true, true) => "online, batch".into(),
            (true, false) => "online".into(),
            (false, true) => "batch".into(),
            (false, false) => "none".into(),
        }
    }
}

/// One DER element: its tag, its content, and what follows it. `None` for
/// anything malformed (high tag numbers, indefinite or overlong lengths,
/// truncation).
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, rest) = rest.split_at(n);
        let len = bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (content, rest) = rest.split_at(len);
    Some((tag, content, rest))
}

/// The first common name (OID 2.5.4.3) of an X.509 `Name`'s content (its
/// RDN sequence, as webpki hands it over), if it is a string.
fn common_name(mut rdns: &[u8]) -> Option<String> {
    const SET: u8 = 0x31;
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    while !rdns.is_empty() {
        let (tag, mut set, rest) = der_element(rdns)?;
        rdns = rest;
        if tag != SET {
            return None;
        }
        while !set.is_empty() {
            let (tag, atv, rest) = der_element(set)?;
            set = rest;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, value) = der_element(atv)?;
            if tag != OID || oid != CN {
                continue;
            }
            let (tag, text, _) = der_element(value)?;
            // UTF8String, PrintableString, T61String, IA5String.
            return match tag {
                0x0c | 0x13 | 0x14 | 0x16 => std::str::from_utf8(text).ok().map(str::to_owned),
                _ => None,
            };
        }
    }
    None
}

#[cfg(feature = "ephemeral")]
pub mod ephemeral {
    //! Throwaway certificates made in memory: a CA, server certificates
    //! for given names, and worker certificates for given classes (rcgen,
    //! ECDSA P-256, valid from 1975 to 4096 as rcgen's defaults). For
    //! loopback mTLS in one process ([`loopback`]) and for tests.

    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };

    use super::{ClientTlsMaterial, Pem, ServerTlsMaterial, TlsError, class_dns_name};
    use crate::WorkloadClass;

    /// A certificate and its key, PEM.
    #[derive(Clone)]
    pub struct Issued {
        /// The certificate.
        pub cert_pem: String,
        /// Its private key (PKCS#8).
        pub key_pem: String,
    }

    /// A CA that signs certificates in memory.
    pub struct Ca {
        issuer: CertifiedIssuer<'static, KeyPair>,
    }

    fn invalid(e: &rcgen::Error) -> TlsError {
        TlsError::Invalid {
            input: "ephemeral certificates".into(),
            message: e.to_string(),
        }
    }

    impl Ca {
        /// A new self-signed CA whose subject's common name is `name`.
        ///
        /// # Errors
        /// Key generation or signing failed.
        pub fn new(name: &str) -> Result<Self, TlsError> {
            let mut params = CertificateParams::default();
            params.distinguished_name.push(DnType::CommonName, name);
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            let key = KeyPair::generate().map_err(|e| invalid(&e))?;
            let issuer = CertifiedIssuer::self_signed(params, key).map_err(|e| invalid(&e))?;
            Ok(Ca { issuer })
        }

        /// The CA's certificate, PEM.
        #[must_use]
        pub fn cert_pem(&self) -> String {
            self.issuer.pem()
        }

        fn issue(
            &self,
            common_name: &str,
            names: &[String],
            usage: ExtendedKeyUsagePurpose,
        ) -> Result<Issued, TlsError> {
            let mut params = CertificateParams::new(names.to_vec()).map_err(|e| invalid(&e))?;
            params
                .distinguished_name
                .push(DnType::CommonName, common_name);
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().map_err(|e| invalid(&e))?;
            let cert = params
                .signed_by(&key, &self.issuer)
                .map_err(|e| invalid(&e))?;
            Ok(Issued {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            })
        }

        /// A server certificate for `names` (DNS names or IP addresses).
        ///
        /// # Errors
        /// A name that is neither, or signing failed.
        pub fn server(&self, names: &[&str]) -> Result<Issued, TlsError> {
            let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
            let cn = names.first().cloned().unwrap_or_default();
            self.issue(&cn, &names, ExtendedKeyUsagePurpose::ServerAuth)
        }

        /// A worker's client certificate with common name `name`, allowed
        /// the `classes` given (`None` in the list: any class; an empty
        /// list: none).
        ///
        /// # Errors
        /// Signing failed.
        pub fn worker(
            &self,
            name: &str,
            classes: &[Option<WorkloadClass>],
        ) -> Result<Issued, TlsError> {
            let names: Vec<String> = classes.iter().map(|c| class_dns_name(*c)).collect();
            self.issue(name, &names, ExtendedKeyUsagePurpose::ClientAuth)
        }
    }

    /// A fresh CA, a server certificate for `localhost`, `127.0.0.1` and
    /// `::1`, and a worker certificate allowed any class: what a process
    /// serving its own in-process workers over loopback mTLS needs.
    ///
    /// # Errors
    /// Key generation or signing failed.
    pub fn loopback() -> Result<(ServerTlsMaterial, ClientTlsMaterial), TlsError> {
        let ca = Ca::new("flotilla ephemeral CA")?;
        let server = ca.server(&["localhost", "127.0.0.1", "::1"])?;
        let worker = ca.worker("flotilla in-process worker", &[None])?;
        let ca_pem = ca.cert_pem();
        Ok((
            ServerTlsMaterial {
                cert: Pem::inline("ephemeral server certificate", &server.cert_pem),
                key: Pem::inline("ephemeral server key", &server.key_pem),
                client_ca: Pem::inline("ephemeral CA", &ca_pem),
            },
            ClientTlsMaterial {
                ca: Pem::inline("ephemeral CA", &ca_pem),
                identity: Some((
                    Pem::inline("ephemeral worker certificate", &worker.cert_pem),
                    Pem::inline("ephemeral worker key", &worker.key_pem),
                )),
                server_name: None,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_flag_and_the_file() {
        let missing = Pem::file("--tls-cert", "/nonexistent/tls.crt");
        let e = missing.certificates().unwrap_err().to_string();
        assert!(
            e.starts_with("--tls-cert /nonexistent/tls.crt: cannot read the file:"),
            "{e}"
        );
        let not_pem = Pem::inline("--tls-key k.pem", "hello");
        let e = not_pem.private_key().unwrap_err().to_string();
        assert!(e.contains("--tls-key k.pem: no private key"), "{e}");
        let e = not_pem.certificates().unwrap_err().to_string();
        assert!(e.contains("no certificate in the file"), "{e}");
        // Debug never shows the bytes (a key's).
        let secret = Pem::inline("a key", "-----BEGIN PRIVATE KEY-----");
        assert_eq!(format!("{secret:?}"), "a key");
    }

    #[test]
    fn malformed_der_reads_as_no_common_name() {
        // Truncated, overlong length, high tag number, wrong outer tag.
        for bad in [
            &[0x31, 0x05, 0x30][..],
            &[0x31, 0x85, 1, 1, 1, 1, 1],
            &[0x3f, 0x01, 0x00],
            &[0x30, 0x00],
        ] {
            assert_eq!(common_name(bad), None, "{bad:?}");
        }
        // SET { SEQUENCE { OID 2.5.4.3, UTF8String "w1" } }
        let rdn = [
            0x31, 0x0b, 0x30, 0x09, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x02, b'w', b'1',
        ];
        assert_eq!(common_name(&rdn).as_deref(), Some("w1"));
    }

    #[test]
    fn class_names() {
        assert_eq!(
            class_dns_name(Some(WorkloadClass::Online)),
            "online.worker.flotilla.internal"
        );
        assert_eq!(class_dns_name(None), "any.worker.flotilla.internal");
    }

    #[cfg(feature = "ephemeral")]
    #[test]
    fn identity_and_classes_come_from_the_certificate() {
        let ca = ephemeral::Ca::new("test CA").unwrap();
        let read = |issued: &ephemeral::Issued| {
            let der = Pem::inline("c", &issued.cert_pem).certificates().unwrap();
            WorkerIdentity::from_certificate(&der[0]).unwrap()
        };
        let batch = read(&ca.worker("w-batch", &[Some(WorkloadClass::Batch)]).unwrap());
        assert_eq!(batch.name, "w-batch");
        assert!(batch.allows(WorkloadClass::Batch) && !batch.allows(WorkloadClass::Online));
        let any = read(&ca.worker("w-any", &[None]).unwrap());
        assert!(any.allows(WorkloadClass::Batch) && any.allows(WorkloadClass::Online));
        let none = read(&ca.worker("w-none", &[]).unwrap());
        assert_eq!(none.classes(), "none");
        let server = read(&ca.server(&["coord.example"]).unwrap());
        assert_eq!(server.name, "coord.example");
        assert!(WorkerIdentity::from_certificate(&CertificateDer::from(vec![0x30, 0x00])).is_err());
    }
}
