//! A DNS server of the tests: answers SRV queries for one name with fixed
//! targets, on UDP port 53 of a loopback address of its own (so that a
//! resolv.conf can name it). Needs the right to bind port 53 (root).

use std::net::{Ipv4Addr, UdpSocket};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use hickory_resolver::proto::rr::rdata::SRV;
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};

/// The running server; stops when dropped.
pub struct SrvServer {
    ip: Ipv4Addr,
    targets: Arc<std::sync::Mutex<Vec<(Name, u16)>>>,
    queries: Arc<AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl SrvServer {
    /// Answers `name` (fully qualified, with the trailing dot) with SRV
    /// records for `targets` (`(host., port)`); everything else NXDOMAIN.
    pub fn start(name: &str, targets: &[(&str, u16)]) -> SrvServer {
        let (socket, ip) = (2..250u8)
            .find_map(|last| {
                let ip = Ipv4Addr::new(127, 0, 53, last);
                UdpSocket::bind((ip, 53)).ok().map(|s| (s, ip))
            })
            .expect("a loopback address with port 53 free");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let name = Name::from_str(name).expect("name");
        let targets = Arc::new(std::sync::Mutex::new(names(targets)));
        let answers = Arc::clone(&targets);
        let queries = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (q, s) = (Arc::clone(&queries), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while !s.load(Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                let Ok(query) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                q.fetch_add(1, Ordering::Relaxed);
                let mut reply = Message::new(
                    query.metadata.id,
                    MessageType::Response,
                    query.metadata.op_code,
                );
                reply.metadata.recursion_desired = query.metadata.recursion_desired;
                reply.metadata.recursion_available = true;
                reply.metadata.authoritative = true;
                reply.queries = query.queries.clone();
                match query.queries.first() {
                    Some(asked)
                        if asked.name() == &name && asked.query_type() == RecordType::SRV =>
                    {
                        let now = answers.lock().map(|t| t.clone()).unwrap_or_default();
                        for (target, port) in &now {
                            reply.add_answer(Record::from_rdata(
                                name.clone(),
                                60,
                                RData::SRV(SRV::new(0, 0, *port, target.clone())),
                            ));
                        }
                    }
                    _ => reply.metadata.response_code = ResponseCode::NXDomain,
                }
                if let Ok(bytes) = reply.to_vec() {
                    let _ = socket.send_to(&bytes, from);
                }
            }
        });
        SrvServer {
            ip,
            targets,
            queries,
            stop,
        }
    }

    /// Answers with `targets` from now on.
    pub fn set_targets(&self, targets: &[(&str, u16)]) {
        if let Ok(mut t) = self.targets.lock() {
            *t = names(targets);
        }
    }

    /// Its address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// Queries received so far.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::Relaxed)
    }
}

fn names(targets: &[(&str, u16)]) -> Vec<(Name, u16)> {
    targets
        .iter()
        .map(|(h, p)| (Name::from_str(h).expect("target"), *p))
        .collect()
}

impl Drop for SrvServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
