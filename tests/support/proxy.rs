//! A TCP proxy the test controls, between one replica and the API server,
//! to make the two faults a network really has:
//! - `cut` closes every connection through it and refuses new ones (a
//!   partition that announces itself: resets);
//! - `stall` stops forwarding without closing anything: open connections go
//!   silent both ways and new ones are accepted and then ignored (a
//!   black hole: a dead host behind a load balancer, a stuck middlebox).
//!   The proxy's own kernel still acknowledges TCP, so keepalive sees a
//!   healthy peer: only the client's own deadlines can find the silence.
//!
//! `restore` lets new connections through again. Connections that went
//! silent stay silent until the client gives them up, as a stuck proxy's
//! flows do.

use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Connections are reset; the number says which cut (each ends the
    /// connections opened before it).
    Cut(u64),
    Stall,
}

pub struct Proxy {
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
}

impl Proxy {
    /// Forwards 127.0.0.1:<free port> to `upstream`, on the current runtime.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (mode, _) = watch::channel(Mode::Forward);
        let modes = mode.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let mut changes = modes.subscribe();
                let accepted_in = *changes.borrow_and_update();
                tokio::spawn(async move {
                    match accepted_in {
                        Mode::Cut(_) => {} // dropped: the connection is reset
                        Mode::Stall => silent(inbound, None, changes).await,
                        Mode::Forward => forward(inbound, upstream, changes).await,
                    }
                });
            }
        });
        Proxy { addr, mode }
    }

    pub fn cut(&self) {
        self.mode.send_modify(|mode| {
            let cuts = match *mode {
                Mode::Cut(n) => n + 1,
                _ => 1,
            };
            *mode = Mode::Cut(cuts);
        });
    }

    pub fn stall(&self) {
        self.mode.send_replace(Mode::Stall);
    }

    pub fn restore(&self) {
        self.mode.send_replace(Mode::Forward);
    }
}

async fn forward(mut inbound: TcpStream, upstream: SocketAddr, mut changes: watch::Receiver<Mode>) {
    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
        return;
    };
    let stalled = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => return,
        changed = changes.wait_for(|m| *m != Mode::Forward) => {
            matches!(changed.as_deref(), Ok(Mode::Stall))
        }
    };
    if stalled {
        silent(inbound, Some(outbound), changes).await;
    }
}

/// Holds a connection open and reads nothing from either side, until a cut
/// ends it.
async fn silent(
    inbound: TcpStream,
    outbound: Option<TcpStream>,
    mut changes: watch::Receiver<Mode>,
) {
    let _held = (inbound, outbound);
    let _ = changes.wait_for(|m| matches!(m, Mode::Cut(_))).await;
}
