//! The listening address: port 0 picks a free port, kept ours for the life of the process.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use anyhow::Context;
use apiagg_config::ServingTls;
use pingora_core::listeners::tls::{Acceptor, TlsSettings};
use pingora_core::listeners::{L4BufferSettings, ListenerConfig, TcpSocketOptions};
use rustls::crypto::CryptoProvider;
use rustls::{version, ServerConfig};

use super::serving::ServingCertificates;
use crate::auth::{ClientCertificates, IdentifyConnections, RequestClientCertificates};

/// Where apiagg listens.
pub struct Listener {
    /// The address, with the port the kernel chose when 0 was asked.
    pub address: SocketAddr,
    tls: Option<ServingTls>,
    /// For port 0: a socket bound to the chosen port and never listening (so it takes no
    /// connection); the listener joins it with `SO_REUSEPORT`, and nobody else can take the port.
    reservation: Option<socket2::Socket>,
}

impl Listener {
    /// Resolves `listen` and reserves a port when it asks for port 0.
    pub fn new(listen: &str, tls: Option<&ServingTls>) -> anyhow::Result<Listener> {
        let address = listen
            .to_socket_addrs()
            .with_context(|| format!("listen address {listen:?}"))?
            .next()
            .with_context(|| format!("listen address {listen:?} resolves to nothing"))?;
        let mut listener = Listener {
            address,
            tls: tls.cloned(),
            reservation: None,
        };
        if address.port() == 0 {
            let socket = socket2::Socket::new(
                socket2::Domain::for_address(address),
                socket2::Type::STREAM,
                None,
            )?;
            socket.set_reuse_port(true)?;
            socket
                .bind(&address.into())
                .with_context(|| format!("binding {address}"))?;
            listener.address = socket
                .local_addr()?
                .as_socket()
                .context("the reserved socket has no address")?;
            listener.reservation = Some(socket);
        }
        Ok(listener)
    }

    /// `http://…` or `https://…`.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }

    /// pingora's listener (TCP): no read buffer; a write buffer large enough for a response head
    /// plus a typical document, so both leave in one write (pingora flushes wherever streaming
    /// needs it; only what is written is touched, about 4 KiB for a watch). With TLS, the
    /// acceptor apiagg runs the handshake with itself (`connections::Counted`, so a handshake is
    /// counted and bounded like the rest of a connection): HTTP/2 by ALPN, certificates from
    /// `certificates` (SNI, reloaded), asking for client certificates when `clients` has CAs to
    /// check them against; with `kx` (`--tls-curve-preferences`), only its key exchanges.
    pub fn config(
        &self,
        certificates: Option<Arc<ServingCertificates>>,
        clients: Option<Arc<ClientCertificates>>,
        kx: Option<Arc<CryptoProvider>>,
    ) -> anyhow::Result<(ListenerConfig, Option<Arc<Acceptor>>)> {
        // No read buffer: pingora's HTTP sessions buffer what they parse themselves, and an L4
        // read buffer is a zeroed 64 KiB per connection: 4.6 KiB of RSS per open watch measured
        // on fresh memory (tests/bench/watch-scale.sh), all of it where zeroing reused memory.
        let buffers = L4BufferSettings::new(0, 64 * 1024);
        let mut config = ListenerConfig::tcp(self.address.to_string()).l4_buffer(buffers);
        if self.reservation.is_some() {
            let mut options = TcpSocketOptions::default();
            options.so_reuseport = Some(true);
            config = config.tcp_socket_options(options);
        }
        if let (Some(tls), Some(certificates)) = (&self.tls, certificates) {
            let cert = tls.cert_file.to_string_lossy();
            let key = tls.key_file.to_string_lossy();
            let mut verifier = None;
            let mut settings = match clients {
                Some(clients) => {
                    let cas: Vec<_> = clients
                        .client_ca
                        .iter()
                        .chain(clients.front_proxy.iter().map(|(ca, _)| ca))
                        .cloned()
                        .collect();
                    let refs: Vec<_> = cas.iter().map(|c| &**c).collect();
                    let clients_verifier = Arc::new(RequestClientCertificates::new(&refs));
                    verifier = Some(clients_verifier.clone());
                    let mut s = TlsSettings::with_callbacks(Box::new(IdentifyConnections(clients)))
                        .map_err(|e| anyhow::anyhow!("TLS settings: {e}"))?;
                    s.set_client_cert_verifier(clients_verifier);
                    s
                }
                None => TlsSettings::intermediate(&cert, &key)
                    .map_err(|e| anyhow::anyhow!("serving certificate {cert} / {key}: {e}"))?,
            };
            settings.set_cert_resolver(certificates.clone());
            settings.enable_h2();
            let mut acceptor = settings.build();
            if let Some(kx) = kx {
                // pingora builds its rustls config with the process's provider; the same config
                // again with only the chosen key exchanges (its callbacks stay).
                let built = acceptor.acceptor.config();
                let builder = ServerConfig::builder_with_provider(kx)
                    .with_protocol_versions(&[&version::TLS12, &version::TLS13])
                    .context("TLS versions with --tls-curve-preferences")?;
                let builder = match verifier {
                    Some(v) => builder.with_client_cert_verifier(v),
                    None => builder.with_no_client_auth(),
                };
                let mut chosen = builder.with_cert_resolver(certificates);
                chosen.alpn_protocols = built.alpn_protocols.clone();
                acceptor.acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(chosen));
            }
            return Ok((config, Some(Arc::new(acceptor))));
        }
        Ok((config, None))
    }
}
