//! What the example servers (`extender`, `webhook`) share: their command
//! line (clap) and, for their tests, serving the router on loopback and
//! POSTing to it.

use clap::Parser;

/// `<example> [--listen ADDR]`.
#[derive(Debug, Parser)]
pub struct ServerArgs {
    /// Address to listen on (host:port); each example has its default.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
}

impl ServerArgs {
    /// The address to listen on: `--listen`, else `default`.
    #[must_use]
    pub fn listen_or(self, default: &str) -> String {
        self.listen.unwrap_or_else(|| default.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::ServerArgs;

    #[test]
    fn the_command_line() {
        let args = |v: &[&str]| {
            ServerArgs::try_parse_from(std::iter::once("example").chain(v.iter().copied()))
                .map(|a| a.listen_or("127.0.0.1:1"))
        };
        assert_eq!(args(&[]).expect("no flag"), "127.0.0.1:1");
        assert_eq!(
            args(&["--listen", "0.0.0.0:80"]).expect("flag"),
            "0.0.0.0:80"
        );
        assert_eq!(args(&["--listen=[::1]:9"]).expect("flag="), "[::1]:9");
        assert!(args(&["--listen"]).is_err(), "needs a value");
        assert!(args(&["--port", "1"]).is_err(), "unknown flag");
    }
}

/// Test helpers: the router served on `127.0.0.1:0`, requests to it.
#[cfg(test)]
pub mod testing {
    use std::net::SocketAddr;
    use std::time::Duration;

    use axum::Router;
    use flotilla_shared::http::{JsonClient, Reply};

    /// Serves `app` on `127.0.0.1:0` on a thread of its own (its own
    /// runtime, so blocking callers on any thread cannot starve it).
    pub fn serve(app: Router) -> SocketAddr {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                tx.send(listener.local_addr().expect("addr")).expect("send");
                axum::serve(listener, app).await.expect("serve");
            });
        });
        rx.recv().expect("the server started")
    }

    /// POSTs `body` to `path` and returns the reply (any status).
    pub fn post(addr: SocketAddr, path: &str, body: Vec<u8>) -> Reply {
        JsonClient::new(None, Duration::from_secs(5))
            .expect("client")
            .post_blocking(&format!("http://{addr}{path}"), body)
            .expect("the server answers")
    }

    /// The reply's body as JSON.
    pub fn json_of(r: &Reply) -> serde_json::Value {
        serde_json::from_slice(&r.body).expect("the reply is JSON")
    }
}
