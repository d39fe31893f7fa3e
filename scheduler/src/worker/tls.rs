//! The client side of the coordinator's mutual TLS: the tonic TLS settings
//! built from the worker's files, read again at every join so certificates
//! rotated on disk are picked up by the next connection.

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use flotilla_shared::tls::{ClientTlsMaterial, Pem, TlsError};

/// Reads `pem` as certificates (checked, so a bad file is an error naming
/// it, not tonic's) and returns its bytes.
fn certificates(pem: &Pem) -> Result<Vec<u8>, TlsError> {
    pem.certificates()?;
    pem.read()
}

/// The TLS settings for one join, from the files as they are now: the
/// CA that must have signed the coordinator's certificate, the client
/// certificate and key, the server name override.
///
/// # Errors
/// An unreadable or malformed file, naming it.
pub(super) fn client_config(m: &ClientTlsMaterial) -> Result<ClientTlsConfig, TlsError> {
    let mut config =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(certificates(&m.ca)?));
    if let Some((cert, key)) = &m.identity {
        let cert = certificates(cert)?;
        key.private_key()?;
        config = config.identity(Identity::from_pem(cert, key.read()?));
    }
    if let Some(name) = &m.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

/// `endpoint` with `config` (only used for `https://` addresses).
///
/// # Errors
/// tonic refused the settings (the certificates it parses again).
pub(super) fn with_tls(
    endpoint: Endpoint,
    config: ClientTlsConfig,
    m: &ClientTlsMaterial,
) -> Result<Endpoint, TlsError> {
    endpoint.tls_config(config).map_err(|e| TlsError::Invalid {
        input: m.ca.label(),
        message: format!("the TLS settings cannot be used: {e}"),
    })
}
