//! What the soak writes down: every call a client made (one line each, in
//! `decisions-<client>.csv`), everything its RLQS Envoys did and heard
//! (`quota-<client>.csv`), and every fault the nemesis caused
//! (`faults.tsv`), all read back by the checker.

use std::fmt;
use std::time::Duration;

use crate::support::envoy_quota::{Enforced, Told};

/// Unix time in µs: the clock Redis decides on (`TIME`), on this machine.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A hit (takes), or the give-back of an in-flight slot (`is_negative_hits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Hit,
    Release,
}

/// What a call got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Over,
    /// A gRPC error the service answered (its code and message).
    Error(String),
    /// The instance could not be reached (refused, reset): it was down.
    Down,
    /// No answer within [`super::rules::CALL_TIMEOUT`].
    Timeout,
}

impl Outcome {
    pub fn of_status(status: &tonic::Status) -> Outcome {
        let message = status.message();
        // A connection refused or reset under the call (the instance was
        // killed) reads Unavailable, or Unknown "transport error" (tonic's
        // words: the service's own errors never say so).
        let transport = match status.code() {
            tonic::Code::Unavailable => true,
            tonic::Code::Unknown => message.starts_with("transport error"),
            _ => false,
        };
        match status.code() {
            _ if transport => Outcome::Down,
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => Outcome::Timeout,
            code => Outcome::Error(
                format!("{code:?} {message}")
                    .chars()
                    .filter(|c| *c != ',' && *c != '\n')
                    .take(80)
                    .collect(),
            ),
        }
    }

    /// The service answered the call (allowed, refused or an error).
    pub fn answered(&self) -> bool {
        matches!(self, Outcome::Ok | Outcome::Over | Outcome::Error(_))
    }
}

/// One call.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub stream: usize,
    pub op: Op,
    pub instance: usize,
    pub send_us: u64,
    pub answer_us: u64,
    pub outcome: Outcome,
}

impl Decision {
    /// `stream,op,instance,send_us,answer_us,outcome`.
    pub fn line(&self) -> String {
        let op = match self.op {
            Op::Hit => "hit",
            Op::Release => "rel",
        };
        let outcome = match &self.outcome {
            Outcome::Ok => "ok".to_string(),
            Outcome::Over => "over".to_string(),
            Outcome::Error(m) => format!("err:{m}"),
            Outcome::Down => "down".to_string(),
            Outcome::Timeout => "timeout".to_string(),
        };
        format!(
            "{},{op},{},{},{},{outcome}",
            self.stream, self.instance, self.send_us, self.answer_us
        )
    }

    pub fn parse(line: &str) -> Option<Decision> {
        let mut f = line.splitn(6, ',');
        let stream = f.next()?.parse().ok()?;
        let op = match f.next()? {
            "hit" => Op::Hit,
            "rel" => Op::Release,
            _ => return None,
        };
        let instance = f.next()?.parse().ok()?;
        let send_us = f.next()?.parse().ok()?;
        let answer_us = f.next()?.parse().ok()?;
        let outcome = match f.next()? {
            "ok" => Outcome::Ok,
            "over" => Outcome::Over,
            "down" => Outcome::Down,
            "timeout" => Outcome::Timeout,
            other => Outcome::Error(other.strip_prefix("err:")?.to_string()),
        };
        Some(Decision {
            stream,
            op,
            instance,
            send_us,
            answer_us,
            outcome,
        })
    }

    /// Answer time less send time, µs.
    pub fn latency_us(&self) -> u64 {
        self.answer_us.saturating_sub(self.send_us)
    }
}

/// The nemesis's kinds of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGSTOP a primary, SIGCONT it later.
    PausePrimary,
    /// SIGKILL a primary; its replica takes over; it comes back as a replica.
    KillPrimary,
    /// `CLUSTER FAILOVER` on a replica.
    Failover,
    /// `CLUSTER FAILOVER FORCE` on a replica.
    ForcedFailover,
    /// One instance's packets to one primary rejected (a partition).
    CutLink,
    /// One instance's packets to one primary delayed.
    SlowLink,
    /// SIGKILL an instance, start it again.
    KillInstance,
    /// A config with other limits renamed into the runtime directory.
    Reload,
    /// The machine stalled: the hypervisor took 0.3 CPU or more of a
    /// second (seen in the steal time, not caused; never scheduled).
    HostStall,
}

impl FaultKind {
    pub const ALL: [FaultKind; 8] = [
        FaultKind::PausePrimary,
        FaultKind::KillPrimary,
        FaultKind::Failover,
        FaultKind::ForcedFailover,
        FaultKind::CutLink,
        FaultKind::SlowLink,
        FaultKind::KillInstance,
        FaultKind::Reload,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::PausePrimary => "pause-primary",
            FaultKind::KillPrimary => "kill-primary",
            FaultKind::Failover => "failover",
            FaultKind::ForcedFailover => "failover-force",
            FaultKind::CutLink => "cut-link",
            FaultKind::SlowLink => "slow-link",
            FaultKind::KillInstance => "kill-instance",
            FaultKind::Reload => "reload",
            FaultKind::HostStall => "host-stall",
        }
    }

    fn parse(s: &str) -> Option<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .chain([FaultKind::HostStall])
            .find(|k| k.name() == s)
    }

    /// The fault stops a Redis primary from counting for a while (every
    /// instance, its slots).
    pub fn stops_a_primary(self) -> bool {
        matches!(
            self,
            FaultKind::PausePrimary
                | FaultKind::KillPrimary
                | FaultKind::Failover
                | FaultKind::ForcedFailover
        )
    }

    /// The fault touches the store for the keys of its slots (for one
    /// instance only when `instance` is set). A stalled machine stalls
    /// every instance and every primary alike.
    pub fn touches_the_store(self) -> bool {
        self.stops_a_primary()
            || matches!(
                self,
                FaultKind::CutLink | FaultKind::SlowLink | FaultKind::HostStall
            )
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One fault, from its start to the moment the nemesis saw it healed.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub id: usize,
    pub kind: FaultKind,
    /// The instance it touches, if only one.
    pub instance: Option<usize>,
    /// The primary's port, for a fault on a primary or a link to one.
    pub primary: Option<u16>,
    /// The slots that primary served when the fault started.
    pub slots: Vec<(u16, u16)>,
    pub start_us: u64,
    pub end_us: u64,
    /// When the replica was seen promoted (a fault that stops a primary).
    pub promoted_us: Option<u64>,
    /// What happened, for the report.
    pub note: String,
}

impl Fault {
    /// Tab-separated: `id kind instance primary slots start end promoted note`.
    pub fn line(&self) -> String {
        let slots: Vec<String> = self.slots.iter().map(|(a, b)| format!("{a}-{b}")).collect();
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.id,
            self.kind,
            opt(self.instance.map(|i| i as u64)),
            opt(self.primary.map(u64::from)),
            if slots.is_empty() {
                "-".to_string()
            } else {
                slots.join(";")
            },
            self.start_us,
            self.end_us,
            opt(self.promoted_us),
            self.note.replace(['\t', '\n'], " ")
        )
    }

    pub fn parse(line: &str) -> Option<Fault> {
        let f: Vec<&str> = line.splitn(9, '\t').collect();
        let [id, kind, instance, primary, slots, start, end, promoted, note] = f.as_slice() else {
            return None;
        };
        let opt = |s: &str| (s != "-").then(|| s.parse::<u64>().ok()).flatten();
        let slots = match *slots {
            "-" => Vec::new(),
            s => s
                .split(';')
                .filter_map(|r| {
                    let (a, b) = r.split_once('-')?;
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect(),
        };
        Some(Fault {
            id: id.parse().ok()?,
            kind: FaultKind::parse(kind)?,
            instance: opt(instance).map(|i| i as usize),
            primary: opt(primary).and_then(|p| u16::try_from(p).ok()),
            slots,
            start_us: start.parse().ok()?,
            end_us: end.parse().ok()?,
            promoted_us: opt(promoted),
            note: note.to_string(),
        })
    }

    /// Whether the fault's primary served `slot` when it started.
    pub fn covers(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

/// What an RLQS Envoy of the soak did or heard, in `quota-<client>.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaEvent {
    pub stream: usize,
    /// The instance of its stream then.
    pub instance: usize,
    pub at_us: u64,
    pub what: Heard,
}

/// The events of an RLQS Envoy.
#[derive(Debug, Clone, PartialEq)]
pub enum Heard {
    /// A stream opened: the Envoy joined, offering `demand` a second.
    Join { demand: f64 },
    /// No stream could be opened.
    Refused,
    /// A report of its usage since the one before (`first`: the
    /// stream's first, `time_elapsed` 0).
    Report {
        first: bool,
        allowed: u64,
        denied: u64,
    },
    /// A message of the server and what it told the bucket (nothing: a
    /// report answered while the board could not answer and the
    /// assignment is live).
    Message { told: Option<Told> },
    /// The Envoy closed its stream: it left, and enforces nothing.
    Leave,
    /// The server or the transport ended the stream.
    Broken,
}

impl QuotaEvent {
    /// `stream,instance,at_us,event[,fields]`.
    pub fn line(&self) -> String {
        let ttl = |t: Option<Duration>| t.map_or("-".to_string(), |t| t.as_millis().to_string());
        let what = match &self.what {
            Heard::Join { demand } => format!("join,{demand}"),
            Heard::Refused => "refused".to_string(),
            Heard::Report {
                first,
                allowed,
                denied,
            } => {
                format!("report,{},{allowed},{denied}", u8::from(*first))
            }
            Heard::Message { told } => match told {
                None => "msg,none".to_string(),
                Some(Told::Abandon) => "msg,abandon".to_string(),
                Some(Told::Assign { enforced, ttl: t }) => match enforced {
                    Enforced::AllowAll => format!("msg,allow,{}", ttl(*t)),
                    Enforced::DenyAll => format!("msg,deny,{}", ttl(*t)),
                    Enforced::Bucket(max, per_fill, interval) => {
                        format!("msg,bucket,{max},{per_fill},{interval},{}", ttl(*t))
                    }
                },
            },
            Heard::Leave => "leave".to_string(),
            Heard::Broken => "broken".to_string(),
        };
        format!("{},{},{},{what}", self.stream, self.instance, self.at_us)
    }

    pub fn parse(line: &str) -> Option<QuotaEvent> {
        let f: Vec<&str> = line.split(',').collect();
        let [stream, instance, at_us, kind, rest @ ..] = f.as_slice() else {
            return None;
        };
        let ttl = |s: &str| -> Option<Option<Duration>> {
            match s {
                "-" => Some(None),
                ms => Some(Some(Duration::from_millis(ms.parse().ok()?))),
            }
        };
        let what = match (*kind, rest) {
            ("join", [demand]) => Heard::Join {
                demand: demand.parse().ok()?,
            },
            ("refused", []) => Heard::Refused,
            ("report", [first, allowed, denied]) => Heard::Report {
                first: *first == "1",
                allowed: allowed.parse().ok()?,
                denied: denied.parse().ok()?,
            },
            ("msg", ["none"]) => Heard::Message { told: None },
            ("msg", ["abandon"]) => Heard::Message {
                told: Some(Told::Abandon),
            },
            ("msg", ["allow", t]) => Heard::Message {
                told: Some(Told::Assign {
                    enforced: Enforced::AllowAll,
                    ttl: ttl(t)?,
                }),
            },
            ("msg", ["deny", t]) => Heard::Message {
                told: Some(Told::Assign {
                    enforced: Enforced::DenyAll,
                    ttl: ttl(t)?,
                }),
            },
            ("msg", ["bucket", max, per_fill, interval, t]) => Heard::Message {
                told: Some(Told::Assign {
                    enforced: Enforced::Bucket(
                        max.parse().ok()?,
                        per_fill.parse().ok()?,
                        interval.parse().ok()?,
                    ),
                    ttl: ttl(t)?,
                }),
            },
            ("leave", []) => Heard::Leave,
            ("broken", []) => Heard::Broken,
            _ => return None,
        };
        Some(QuotaEvent {
            stream: stream.parse().ok()?,
            instance: instance.parse().ok()?,
            at_us: at_us.parse().ok()?,
            what,
        })
    }
}
