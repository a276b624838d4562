//! A test [`Network`]: names resolve to the addresses a test chooses (public ones
//! included), and connects to chosen addresses are routed to local receivers.
//! Anything else that is not loopback is unreachable, so tests never leave 127.0.0.1.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use async_trait::async_trait;
use shared::notify::webhook::Network;
use tokio::net::TcpStream;

/// Resolution and routing tables.
#[derive(Default)]
pub struct TestNetwork {
    names: Mutex<HashMap<String, Vec<IpAddr>>>,
    routes: Mutex<HashMap<SocketAddr, SocketAddr>>,
    connects: Mutex<Vec<SocketAddr>>,
}

impl TestNetwork {
    /// An empty network.
    pub fn new() -> TestNetwork {
        TestNetwork::default()
    }

    /// `host` resolves to `ips`.
    pub fn name(&self, host: &str, ips: &[&str]) -> &Self {
        self.names.lock().unwrap().insert(
            host.to_string(),
            ips.iter().map(|i| i.parse().unwrap()).collect(),
        );
        self
    }

    /// Connections to `from` reach `to` (a local receiver).
    pub fn route(&self, from: &str, to: SocketAddr) -> &Self {
        self.routes
            .lock()
            .unwrap()
            .insert(from.parse().unwrap(), to);
        self
    }

    /// Every address a connection was attempted to, in order.
    pub fn connects(&self) -> Vec<SocketAddr> {
        self.connects.lock().unwrap().clone()
    }
}

#[async_trait]
impl Network for TestNetwork {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        match self.names.lock().unwrap().get(host) {
            Some(ips) => Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "test network: unknown name",
            )),
        }
    }

    async fn connect(&self, addr: SocketAddr) -> std::io::Result<TcpStream> {
        self.connects.lock().unwrap().push(addr);
        let target = self.routes.lock().unwrap().get(&addr).copied();
        match target {
            Some(to) => TcpStream::connect(to).await,
            None if addr.ip().is_loopback() => TcpStream::connect(addr).await,
            None => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "test network: unreachable",
            )),
        }
    }
}
