//! A real HTTP/1.1 receiver on 127.0.0.1 for the web-hook tests, plain or HTTPS with a
//! certificate of the test CA. It records every request exactly as it arrived
//! (method, path, headers in order, body) and answers with a configurable status,
//! optionally after a delay (timeouts) or with a `Location` (redirects).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use super::certs::Leaf;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Request {
    /// `POST`, …
    pub method: String,
    /// The request target.
    pub path: String,
    /// Header names (lower case) and values, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("the body is JSON")
    }
}

struct State {
    requests: Vec<Request>,
    status: u16,
    delay: Duration,
}

/// The running receiver. Dropping it stops accepting.
pub struct HttpReceiver {
    /// Its address on 127.0.0.1.
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpReceiver {
    /// A plain HTTP receiver answering 200.
    pub async fn start() -> HttpReceiver {
        HttpReceiver::start_with(None).await
    }

    /// An HTTPS receiver serving `leaf`.
    pub async fn start_tls(leaf: &Leaf) -> HttpReceiver {
        HttpReceiver::start_with(Some(leaf.acceptor())).await
    }

    async fn start_with(tls: Option<tokio_native_tls::TlsAcceptor>) -> HttpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            requests: Vec::new(),
            status: 200,
            delay: Duration::ZERO,
        }));
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let st = st.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        Some(a) => {
                            if let Ok(s) = a.accept(tcp).await {
                                let _ = serve(s, &st).await;
                            }
                        }
                        None => {
                            let _ = serve(tcp, &st).await;
                        }
                    }
                });
            }
        });
        HttpReceiver { addr, state, task }
    }

    /// Answer with `status` from now on.
    pub fn respond(&self, status: u16) {
        self.state.lock().unwrap().status = status;
    }

    /// Wait `d` before answering.
    pub fn delay(&self, d: Duration) {
        self.state.lock().unwrap().delay = d;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

async fn serve<S>(mut s: S, st: &Arc<Mutex<State>>) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let (status, delay) = {
        let mut g = st.lock().unwrap();
        g.requests.push(Request {
            method,
            path,
            headers,
            body,
        });
        (g.status, g.delay)
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let location = if (300..400).contains(&status) {
        "Location: http://169.254.169.254/latest/meta-data/\r\n"
    } else {
        ""
    };
    s.write_all(
        format!(
            "HTTP/1.1 {status} Test\r\n{location}Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await?;
    s.flush().await?;
    let _ = s.shutdown().await;
    Ok(())
}
