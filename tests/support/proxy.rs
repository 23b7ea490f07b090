//! A TCP proxy the test controls, to cut one replica from the API server:
//! `cut` closes every connection through it and refuses new ones (as a
//! network partition would look to the replica), `restore` lets them in again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub addr: SocketAddr,
    open: Arc<AtomicBool>,
    /// Bumped by `cut`: connections opened before it end.
    epoch: watch::Sender<u64>,
}

impl Proxy {
    /// Forwards 127.0.0.1:<free port> to `upstream`, on the current runtime.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let open = Arc::new(AtomicBool::new(true));
        let (epoch, _) = watch::channel(0u64);
        let (accepting, epochs) = (open.clone(), epoch.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !accepting.load(Ordering::Acquire) {
                    continue; // dropped: the connection is reset
                }
                let mut cut = epochs.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy { addr, open, epoch }
    }

    pub fn cut(&self) {
        self.open.store(false, Ordering::Release);
        self.epoch.send_modify(|e| *e += 1);
    }

    pub fn restore(&self) {
        self.open.store(true, Ordering::Release);
    }
}
