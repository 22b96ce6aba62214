//! The soak's rule mix: the descriptor YAML the instances load (two
//! versions, swapped by the reload fault), the streams the clients offer,
//! and the checker's model of what each rule allows.

/// The domain every rule is in.
pub const DOMAIN: &str = "chaos";

/// How long a call (a decision, or an RLQS stream's opening) may take
/// before the client gives up on it: far past any deadline the service
/// sets itself, so a call that reaches it was never answered.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// What a rule's algorithm allows, under config A (`[0]`) and B (`[1]`).
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// At most `limits` admissions per aligned window of `unit_s` seconds
    /// (the original's fixed window, a calendar day, and the current
    /// window of a sliding window, which admits only while its estimate is
    /// below the limit).
    Window { unit_s: u64, limits: [u64; 2] },
    /// At most `burst + rate × t` in any span `t`.
    Bucket { rates: [f64; 2], bursts: [f64; 2] },
    /// At most `max` held at once.
    InFlight { max: u64 },
    /// An RLQS board: the assignments in force on the Envoys that report
    /// the rule's bucket add up to at most the rate, `rates` a second.
    Board { rates: [f64; 2] },
}

/// The rule's `failure_mode`, with an open rule's floor per window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    Error,
    Open { floor: u64, limit: u64 },
    Closed,
}

/// Where a rule's key sits on the Cluster, for telling which faults touch it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Placement {
    /// The original's key, `chaos_<rule>_<value>_<window start>`: its slot
    /// changes with every window.
    Original,
    /// A hash-tagged key of the opt-in limits: `{chaos_<rule>_<value>_}`.
    Tagged,
    /// Sub-buckets or leases on any primary.
    Anywhere,
}

/// One rule of the mix.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub name: &'static str,
    pub shape: Shape,
    pub mode: Mode,
    /// `durability: replicated`: no count is lost to a failover.
    pub durable: bool,
    pub placement: Placement,
    /// Whether its window is local-first (`sync_interval`): it may admit
    /// `N·P` over its limit (`P`: the service's own [`Share`] of it at
    /// [`LOCAL_FIRST_MAX_OVER`]), and `(N + 1)·P` more for each instance
    /// killed within it (its unwritten admissions never reach the store,
    /// and its successor starts cold).
    ///
    /// [`Share`]: ratelimit::resilience::leases::local::Share
    pub local_first: bool,
    /// The YAML of its `rate_limit` block under config A and B.
    yaml: [&'static str; 2],
}

/// The instances' `LOCAL_FIRST_MAX_OVER`: 20 % of a local-first window's
/// limit over the instances, so that one of 40 a second is decided locally
/// at all.
pub const LOCAL_FIRST_MAX_OVER: f64 = 0.2;

/// The rules, in the order of the YAML.
pub const RULES: &[Rule] = &[
    Rule {
        name: "fixed",
        shape: Shape::Window { unit_s: 1, limits: [20, 40] },
        mode: Mode::Error,
        durable: false,
        placement: Placement::Original,
        local_first: false,
        yaml: [
            "{unit: second, requests_per_unit: 20}",
            "{unit: second, requests_per_unit: 40}",
        ],
    },
    Rule {
        name: "bucket",
        shape: Shape::Bucket { rates: [20.0, 40.0], bursts: [40.0, 80.0] },
        mode: Mode::Open { floor: 4, limit: 20 },
        durable: false,
        placement: Placement::Tagged,
        local_first: false,
        yaml: [
            "{unit: second, requests_per_unit: 20, algorithm: token_bucket, burst: 40, failure_mode: open, fallback_requests_per_unit: 4}",
            "{unit: second, requests_per_unit: 40, algorithm: token_bucket, burst: 80, failure_mode: open, fallback_requests_per_unit: 4}",
        ],
    },
    Rule {
        name: "sliding",
        shape: Shape::Window { unit_s: 2, limits: [40, 40] },
        mode: Mode::Error,
        durable: false,
        placement: Placement::Tagged,
        local_first: false,
        yaml: [
            "{unit: second, unit_multiplier: 2, requests_per_unit: 40, algorithm: sliding_window}",
            "{unit: second, unit_multiplier: 2, requests_per_unit: 40, algorithm: sliding_window}",
        ],
    },
    Rule {
        name: "closed",
        shape: Shape::Window { unit_s: 1, limits: [20, 40] },
        mode: Mode::Closed,
        durable: false,
        placement: Placement::Original,
        local_first: false,
        yaml: [
            "{unit: second, requests_per_unit: 20, failure_mode: closed}",
            "{unit: second, requests_per_unit: 40, failure_mode: closed}",
        ],
    },
    Rule {
        name: "durable",
        shape: Shape::Window { unit_s: 1, limits: [20, 40] },
        mode: Mode::Closed,
        durable: true,
        placement: Placement::Original,
        local_first: false,
        yaml: [
            "{unit: second, requests_per_unit: 20, failure_mode: closed, durability: replicated}",
            "{unit: second, requests_per_unit: 40, failure_mode: closed, durability: replicated}",
        ],
    },
    Rule {
        name: "open",
        shape: Shape::Window { unit_s: 1, limits: [20, 40] },
        mode: Mode::Open { floor: 3, limit: 20 },
        durable: false,
        placement: Placement::Original,
        local_first: false,
        yaml: [
            "{unit: second, requests_per_unit: 20, failure_mode: open, fallback_requests_per_unit: 3}",
            "{unit: second, requests_per_unit: 40, failure_mode: open, fallback_requests_per_unit: 3}",
        ],
    },
    Rule {
        name: "local",
        shape: Shape::Window { unit_s: 1, limits: [40, 60] },
        mode: Mode::Error,
        durable: false,
        placement: Placement::Original,
        local_first: true,
        yaml: [
            "{unit: second, requests_per_unit: 40, sync_interval: 50ms}",
            "{unit: second, requests_per_unit: 60, sync_interval: 50ms}",
        ],
    },
    Rule {
        name: "leased",
        shape: Shape::Bucket { rates: [300.0, 300.0], bursts: [300.0, 300.0] },
        mode: Mode::Error,
        durable: false,
        placement: Placement::Anywhere,
        local_first: false,
        yaml: [
            "{unit: second, requests_per_unit: 300, algorithm: token_bucket, burst: 300, lease: true}",
            "{unit: second, requests_per_unit: 300, algorithm: token_bucket, burst: 300, lease: true}",
        ],
    },
    Rule {
        name: "sharded",
        shape: Shape::Window { unit_s: 1, limits: [100, 100] },
        mode: Mode::Error,
        durable: false,
        placement: Placement::Anywhere,
        local_first: false,
        yaml: [
            "{unit: second, requests_per_unit: 100, shards: 4}",
            "{unit: second, requests_per_unit: 100, shards: 4}",
        ],
    },
    Rule {
        name: "daily",
        shape: Shape::Window { unit_s: 86_400, limits: [3000, 3000] },
        mode: Mode::Error,
        durable: false,
        placement: Placement::Tagged,
        local_first: false,
        yaml: [
            "{unit: day, requests_per_unit: 3000, calendar: true}",
            "{unit: day, requests_per_unit: 3000, calendar: true}",
        ],
    },
    Rule {
        name: "inflight",
        shape: Shape::InFlight { max: 5 },
        mode: Mode::Error,
        durable: false,
        placement: Placement::Tagged,
        local_first: false,
        yaml: [
            "{algorithm: concurrency, max_in_flight: 5, max_duration: 2s}",
            "{algorithm: concurrency, max_in_flight: 5, max_duration: 2s}",
        ],
    },
    Rule {
        name: "quota",
        shape: Shape::Board { rates: [60.0, 120.0] },
        mode: Mode::Error,
        durable: false,
        placement: Placement::Tagged,
        local_first: false,
        yaml: [
            "{unit: second, requests_per_unit: 60}",
            "{unit: second, requests_per_unit: 120}",
        ],
    },
];

impl Rule {
    pub fn by_name(name: &str) -> Option<&'static Rule> {
        RULES.iter().find(|r| r.name == name)
    }
}

impl Rule {
    /// Whether its streams are RLQS Envoys rather than calls.
    pub fn is_board(&self) -> bool {
        matches!(self.shape, Shape::Board { .. })
    }

    /// A window rule's window (s) and the most it may admit in one by the
    /// algorithm alone, under config `version` (0: A, 1: B).
    pub fn window_bound(&self, version: usize) -> Option<(u64, u64)> {
        match self.shape {
            Shape::Window { unit_s, limits } => Some((unit_s, limits[version])),
            _ => None,
        }
    }
}

/// The descriptor YAML of config `version` (0: A, 1: B): B doubles the
/// limits of the rules that change.
pub fn config(version: usize) -> String {
    let mut yaml = format!("domain: {DOMAIN}\ndescriptors:\n");
    for rule in RULES {
        yaml.push_str(&format!(
            "  - key: {}\n    rate_limit: {}\n",
            rule.name, rule.yaml[version]
        ));
    }
    yaml
}

/// One stream of calls a client offers: a rule's key at a rate, a pool of
/// workers that hold an in-flight slot and give it back, or (a board
/// rule's) one simulated Envoy reporting its bucket over RLQS, at a demand
/// it draws anew each time it joins.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    pub id: usize,
    pub rule: &'static str,
    pub value: String,
    /// Calls a second (for a hold stream: its workers; for an Envoy: its
    /// largest demand).
    pub rate: f64,
    /// In-flight streams: how long a worker holds its slot, ms (min, max).
    pub hold_ms: Option<(u64, u64)>,
}

/// The streams, each rule's keys offered below, at and above the limit.
pub fn streams() -> Vec<Stream> {
    let plan: &[(&str, &[f64])] = &[
        ("fixed", &[50.0, 50.0, 50.0, 50.0, 50.0, 50.0]),
        ("bucket", &[10.0, 20.0, 60.0]),
        ("sliding", &[10.0, 20.0, 50.0]),
        ("closed", &[50.0, 50.0, 50.0, 50.0]),
        ("durable", &[50.0, 50.0, 50.0, 50.0]),
        ("open", &[50.0, 50.0, 50.0]),
        ("local", &[30.0, 60.0, 90.0, 150.0]),
        ("leased", &[450.0]),
        ("sharded", &[250.0]),
        ("daily", &[10.0]),
    ];
    let mut out = Vec::new();
    let mut add = |rule: &'static str, value: String, rate: f64, hold_ms: Option<(u64, u64)>| {
        out.push(Stream {
            id: out.len(),
            rule,
            value,
            rate,
            hold_ms,
        });
    };
    for (rule, rates) in plan {
        for (i, rate) in rates.iter().enumerate() {
            add(rule, format!("{}{i}", &rule[..1]), *rate, None);
        }
    }
    for i in 0..2 {
        add("inflight", format!("i{i}"), 8.0, Some((50, 150)));
    }
    // Two boards of three Envoys each.
    for board in 0..2 {
        for _ in 0..3 {
            add("quota", format!("q{board}"), 90.0, None);
        }
    }
    out
}

impl Stream {
    /// Whether it is an RLQS Envoy (its rule a board) rather than calls.
    pub fn is_envoy(&self) -> bool {
        Rule::by_name(self.rule).is_some_and(Rule::is_board)
    }
}

/// A stream as one argument of a client process, and back.
impl Stream {
    pub fn to_arg(&self) -> String {
        let (lo, hi) = self.hold_ms.unwrap_or((0, 0));
        format!(
            "{}|{}|{}|{}|{lo}|{hi}",
            self.id, self.rule, self.value, self.rate
        )
    }

    pub fn from_arg(arg: &str) -> Option<Stream> {
        let mut f = arg.split('|');
        let id = f.next()?.parse().ok()?;
        let rule = Rule::by_name(f.next()?)?.name;
        let value = f.next()?.to_string();
        let rate = f.next()?.parse().ok()?;
        let lo: u64 = f.next()?.parse().ok()?;
        let hi: u64 = f.next()?.parse().ok()?;
        Some(Stream {
            id,
            rule,
            value,
            rate,
            hold_ms: (hi > 0).then_some((lo, hi)),
        })
    }
}
