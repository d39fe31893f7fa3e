//! The client side of the coordinator's mutual TLS: the tonic TLS settings
//! built from the worker's files, read again at every join so certificates
//! rotated on disk are picked up by the next connection.

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use flotilla_shared::tls::{ClientTlsMaterial, TlsError};

/// The TLS settings for one join, from the files as they are now: the
/// CA that must have signed the coordinator's certificate, the client
/// certificate and key, the server name override.
///
/// # Errors
/// An unreadable or malformed file, naming it.
fn client_config(m: &ClientTlsMaterial) -> Result<ClientTlsConfig, TlsError> {
    // Each file read once and checked, so a bad one is an error naming
    // it, not tonic's.
    let mut config =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(m.ca.certificates_pem()?));
    if let Some((cert, key)) = &m.identity {
        config = config.identity(Identity::from_pem(
            cert.certificates_pem()?,
            key.private_key_pem()?,
        ));
    }
    if let Some(name) = &m.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

/// `endpoints` (address, endpoint) with the TLS settings of `tls` read
/// now, as the files are; unchanged without `tls`.
///
/// # Errors
/// An unreadable or malformed file, or settings tonic refuses.
pub(super) fn with_tls(
    tls: Option<&ClientTlsMaterial>,
    endpoints: &[(String, Endpoint)],
) -> Result<Vec<(String, Endpoint)>, TlsError> {
    let Some(m) = tls else {
        return Ok(endpoints.to_vec());
    };
    let config = client_config(m)?;
    endpoints
        .iter()
        .map(|(addr, ep)| {
            let ep = ep
                .clone()
                .tls_config(config.clone())
                .map_err(|e| TlsError::Invalid {
                    input: m.ca.label(),
                    message: format!("the TLS settings cannot be used: {e}"),
                })?;
            Ok((addr.clone(), ep))
        })
        .collect()
}
