//! An HTTP/1.1 upstream for Envoy that holds each request for a while and
//! counts how many it is serving at once, per tenant (the `x-tenant`
//! header): what an in-flight limit protects, measured where it matters.
//! One thread per connection; keep-alive; GET only (no body is read).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Per tenant: requests being served now, and the most at once.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    /// Being served now.
    pub now: u64,
    /// The most served at once so far.
    pub peak: u64,
    /// Served in all.
    pub served: u64,
}

/// A running upstream; its threads end with the test process.
pub struct HoldingUpstream {
    /// Where it listens.
    pub addr: SocketAddr,
    counts: Arc<Mutex<HashMap<String, Concurrency>>>,
}

impl HoldingUpstream {
    /// Holds each request `hold` before answering 200, unless the request
    /// names its own hold in `x-hold-ms`.
    pub fn start(hold: Duration) -> HoldingUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
        let addr = listener.local_addr().expect("its address");
        let counts: Arc<Mutex<HashMap<String, Concurrency>>> = Arc::default();
        let shared = Arc::clone(&counts);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let counts = Arc::clone(&shared);
                std::thread::spawn(move || serve(stream, hold, &counts));
            }
        });
        HoldingUpstream { addr, counts }
    }

    /// What `tenant` has seen.
    pub fn of(&self, tenant: &str) -> Concurrency {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(tenant).copied().unwrap_or_default()
    }

    /// Every tenant's counts.
    pub fn all(&self) -> HashMap<String, Concurrency> {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn serve(stream: TcpStream, hold: Duration, counts: &Mutex<HashMap<String, Concurrency>>) {
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        // One request head: the request line, headers, a blank line.
        let (mut tenant, mut hold_for) = (String::new(), hold);
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let l = line.trim_end();
            if l.is_empty() && !first {
                break;
            }
            first = false;
            if let Some((name, value)) = l.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "x-tenant" => tenant = value.trim().to_string(),
                    "x-hold-ms" => {
                        if let Ok(ms) = value.trim().parse() {
                            hold_for = Duration::from_millis(ms);
                        }
                    }
                    _ => {}
                }
            }
        }
        let change = |f: &dyn Fn(&mut Concurrency)| {
            let mut counts = counts.lock().unwrap_or_else(|e| e.into_inner());
            f(counts.entry(tenant.clone()).or_default());
        };
        change(&|c| {
            c.now += 1;
            c.peak = c.peak.max(c.now);
            c.served += 1;
        });
        std::thread::sleep(hold_for);
        change(&|c| c.now -= 1);
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n";
        if out.write_all(answer).is_err() {
            return;
        }
    }
}
