//! A client process of the soak: offers its streams to the instances, in
//! turn, until the end time, and logs every call with its send and answer
//! times (see [`super::log::Decision`]); a board rule's streams are RLQS
//! Envoys ([`super::quota`]), which log what they did and heard.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tokio::sync::{mpsc, Semaphore};
use tonic::transport::Channel;

use super::log::{now_us, Decision, Op, Outcome};
use super::quota;
use super::rules::{Stream, CALL_TIMEOUT, DOMAIN};
use crate::support;

/// Calls of one stream in flight at once; a tick beyond it is not sent
/// (an instance that hangs must not make a client grow without bound).
const IN_FLIGHT: usize = 64;

/// `client LOG QUOTA_LOG END_US ADDR,ADDR,… STREAM…`: runs until `END_US`
/// (unix µs).
pub fn main(args: &[String]) {
    let [log, quota_log, end, addrs, streams @ ..] = args else {
        eprintln!("usage: chaos client LOG QUOTA_LOG END_US ADDRS STREAM…");
        std::process::exit(2);
    };
    let end_us: u64 = end.parse().unwrap_or(0);
    let addrs: Vec<String> = addrs.split(',').map(str::to_string).collect();
    let streams: Vec<Stream> = streams.iter().filter_map(|s| Stream::from_arg(s)).collect();
    let create = |path: &str| match std::fs::File::create(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("chaos client: cannot write {path}: {e}");
            std::process::exit(2);
        }
    };
    let (file, quota_file) = (create(log), create(quota_log));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(file, quota_file, end_us, addrs, streams));
}

/// A task writing each line it is sent to `file`, until every sender is gone.
fn writer(file: std::fs::File) -> (mpsc::UnboundedSender<String>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let task = tokio::task::spawn_blocking(move || {
        let mut out = std::io::BufWriter::new(file);
        while let Some(line) = rx.blocking_recv() {
            if writeln!(out, "{line}").is_err() {
                break;
            }
        }
        let _ = out.flush();
    });
    (tx, task)
}

async fn run(
    file: std::fs::File,
    quota_file: std::fs::File,
    end_us: u64,
    addrs: Vec<String>,
    streams: Vec<Stream>,
) {
    let channels: Vec<Channel> = addrs
        .iter()
        .map(|a| {
            Channel::from_shared(format!("http://{a}"))
                .expect("an instance's address")
                .connect_timeout(Duration::from_millis(200))
                .connect_lazy()
        })
        .collect();
    let clients = Arc::new(
        channels
            .iter()
            .cloned()
            .map(RateLimitServiceClient::new)
            .collect::<Vec<_>>(),
    );
    let (tx, decisions_written) = writer(file);
    let (quota_tx, heard_written) = writer(quota_file);
    let mut tasks = Vec::new();
    for stream in streams {
        let (clients, tx) = (Arc::clone(&clients), tx.clone());
        tasks.push(match stream.hold_ms {
            _ if stream.is_envoy() => tokio::spawn(quota::envoy(
                stream,
                channels.clone(),
                quota_tx.clone(),
                end_us,
            )),
            None => tokio::spawn(offer(stream, clients, tx, end_us)),
            Some(_) => tokio::spawn(hold(stream, clients, tx, end_us)),
        });
    }
    drop((tx, quota_tx));
    for t in tasks {
        let _ = t.await;
    }
    let _ = decisions_written.await;
    let _ = heard_written.await;
}

/// Calls at the stream's rate, open loop: a slow answer does not slow the
/// next call.
async fn offer(
    stream: Stream,
    clients: Arc<Vec<RateLimitServiceClient<Channel>>>,
    tx: mpsc::UnboundedSender<String>,
    end_us: u64,
) {
    let period = Duration::from_secs_f64(1.0 / stream.rate.max(0.1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let room = Arc::new(Semaphore::new(IN_FLIGHT));
    let stream = Arc::new(stream);
    let mut seq = stream.id;
    while now_us() < end_us {
        tick.tick().await;
        let Ok(permit) = Arc::clone(&room).try_acquire_owned() else {
            continue;
        };
        seq += 1;
        let instance = seq % clients.len();
        let (client, tx, stream) = (clients[instance].clone(), tx.clone(), Arc::clone(&stream));
        tokio::spawn(async move {
            let d = call(client, &stream, instance, Op::Hit).await;
            let _ = tx.send(d.line());
            drop(permit);
        });
    }
}

/// `rate` workers, each taking an in-flight slot, holding it, and giving
/// it back on the same instance (as an Envoy does at the end of a stream).
async fn hold(
    stream: Stream,
    clients: Arc<Vec<RateLimitServiceClient<Channel>>>,
    tx: mpsc::UnboundedSender<String>,
    end_us: u64,
) {
    let (lo, hi) = stream.hold_ms.unwrap_or((50, 150));
    let stream = Arc::new(stream);
    let workers: Vec<_> = (0..stream.rate as usize)
        .map(|w| {
            let (clients, tx, stream) = (Arc::clone(&clients), tx.clone(), Arc::clone(&stream));
            tokio::spawn(async move {
                let mut seq = w;
                while now_us() < end_us {
                    seq += 1;
                    let instance = seq % clients.len();
                    let taken = call(clients[instance].clone(), &stream, instance, Op::Hit).await;
                    let admitted = taken.outcome == Outcome::Ok;
                    let _ = tx.send(taken.line());
                    if !admitted {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    let ms = lo + rand::random::<u64>() % (hi - lo + 1);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    let given =
                        call(clients[instance].clone(), &stream, instance, Op::Release).await;
                    let _ = tx.send(given.line());
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
}

/// One `ShouldRateLimit` call of the stream's descriptor.
async fn call(
    mut client: RateLimitServiceClient<Channel>,
    stream: &Stream,
    instance: usize,
    op: Op,
) -> Decision {
    let mut descriptor = support::desc(&[(stream.rule, &stream.value)]);
    descriptor.is_negative_hits = op == Op::Release;
    let mut request = tonic::Request::new(support::request(DOMAIN, vec![descriptor]));
    request.set_timeout(CALL_TIMEOUT);
    let send_us = now_us();
    let answer = tokio::time::timeout(
        CALL_TIMEOUT + Duration::from_millis(100),
        client.should_rate_limit(request),
    )
    .await;
    let answer_us = now_us();
    let outcome = match answer {
        Err(_) => Outcome::Timeout,
        Ok(Ok(r)) => match r.into_inner().overall_code {
            support::OK => Outcome::Ok,
            support::OVER => Outcome::Over,
            other => Outcome::Error(format!("code {other}")),
        },
        Ok(Err(status)) => Outcome::of_status(&status),
    };
    Decision {
        stream: stream.id,
        op,
        instance,
        send_us,
        answer_us,
        outcome,
    }
}
