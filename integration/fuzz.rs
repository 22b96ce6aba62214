//! Mutation fuzzing of the three places untrusted bytes enter: the gRPC
//! request decoder (the wire message into the engine's request, then a
//! decision), the `/json` body parser (likewise) and the config loader.
//! Every case is a valid input (from a small corpus, or for requests a
//! randomly generated structure: any strings, counts, override units and
//! hits) given up to a few byte mutations by a seeded generator (bit flips,
//! byte sets, insertions, deletions, duplicated and spliced ranges,
//! truncation), so most cases reach past the decoders and a failure is
//! reproducible from its seed.
//!
//! Each case runs under `catch_unwind`; the test fails on any panic. The
//! number of cases is `FUZZ_CASES` (default 100,000, split over the three
//! targets); `scripts/fuzz.sh` runs 1,000,000 in release mode.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3 as pb;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ratelimit::config::{load, ConfigFile, LiveConfig};
use ratelimit::engine::{Engine, EngineOptions, RateLimitRequest};
use ratelimit::limiter::SystemClock;
use ratelimit::metrics::Stats;
use ratelimit::store::MemoryStore;

const CONFIG: &str = include_str!("../examples/config/example.yaml");
const ALGORITHMS: &str = include_str!("../examples/config/algorithms.yaml");

/// One byte-level mutation of `input`.
fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    let len = input.len();
    match rng.random_range(0..7) {
        0 if len > 0 => {
            let i = rng.random_range(0..len);
            input[i] ^= 1 << rng.random_range(0..8);
        }
        1 if len > 0 => {
            let i = rng.random_range(0..len);
            input[i] = [0, 0xff, b'{', b'"', b':', b'\n', b'*', 0x80][rng.random_range(0..8)];
        }
        2 => {
            let i = rng.random_range(0..=len);
            let n = rng.random_range(1..8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            input.splice(i..i, bytes);
        }
        3 if len > 0 => {
            let i = rng.random_range(0..len);
            let j = (i + rng.random_range(1..16)).min(len);
            input.drain(i..j);
        }
        4 if len > 0 => {
            let i = rng.random_range(0..len);
            let j = (i + rng.random_range(1..64)).min(len);
            let copy = input[i..j].to_vec();
            let at = rng.random_range(0..=input.len());
            input.splice(at..at, copy);
        }
        5 => {
            let other = &corpus[rng.random_range(0..corpus.len())];
            if !other.is_empty() {
                let i = rng.random_range(0..other.len());
                let at = rng.random_range(0..=len);
                input.splice(at..at, other[i..].iter().take(64).copied());
            }
        }
        _ => input.truncate(rng.random_range(0..=len)),
    }
}

/// `cases` inputs through `target`: each made by `make` (a corpus entry or
/// a generated structure), then given up to `most` byte mutations; the
/// number that panicked.
fn fuzz(
    seed: u64,
    cases: usize,
    corpus: &[Vec<u8>],
    most: usize,
    mut make: impl FnMut(&mut StdRng, usize) -> Vec<u8>,
    mut target: impl FnMut(&[u8]),
) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut panics = 0;
    for case in 0..cases {
        let mut input = make(&mut rng, case);
        for _ in 0..rng.random_range(0..=most) {
            mutate(&mut rng, &mut input, corpus);
        }
        if std::panic::catch_unwind(AssertUnwindSafe(|| target(&input))).is_err() {
            panics += 1;
            eprintln!("panic: seed {seed}, case {case}, input {input:?}");
        }
    }
    panics
}

/// A short string of the characters configs and keys are made of, and of
/// some they are not.
fn word(rng: &mut StdRng) -> String {
    const CHARS: &[char] = &[
        'a', 'b', 'k', '_', '*', '.', ':', '{', '}', ' ', '0', '9', 'é', '\0', '/',
    ];
    let n = rng.random_range(0..12);
    (0..n)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())])
        .collect()
}

/// A key the example configs know, or any word.
fn key(rng: &mut StdRng) -> String {
    const KNOWN: &[&str] = &[
        "category",
        "foo",
        "bar",
        "key",
        "remote_address",
        "tenant",
        "path",
    ];
    match rng.random_bool(0.7) {
        true => KNOWN[rng.random_range(0..KNOWN.len())].to_string(),
        false => word(rng),
    }
}

/// A random wire request: any domain, up to 12 descriptors of up to 6
/// entries, overrides with any unit number, any hits.
fn random_request(rng: &mut StdRng) -> pb::RateLimitRequest {
    let domain = match rng.random_bool(0.8) {
        true => "rl".to_string(),
        false => word(rng),
    };
    let descriptors = (0..rng.random_range(0..12))
        .map(|_| RateLimitDescriptor {
            entries: (0..rng.random_range(0..6))
                .map(|_| Entry {
                    key: key(rng),
                    value: word(rng),
                })
                .collect(),
            limit: rng.random_bool(0.2).then(|| {
                envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride {
                    requests_per_unit: rng.random(),
                    unit: rng.random_range(-2..10),
                }
            }),
            hits_addend: rng
                .random_bool(0.2)
                .then(|| envoy_types::pb::google::protobuf::UInt64Value { value: rng.random() }),
            is_negative_hits: rng.random_bool(0.05),
        })
        .collect();
    pb::RateLimitRequest {
        domain,
        descriptors,
        hits_addend: if rng.random_bool(0.1) {
            rng.random()
        } else {
            1
        },
    }
}

/// The same request as a `/json` body, with field names in either style
/// and, now and then, a value of the wrong type.
fn random_json(rng: &mut StdRng) -> Vec<u8> {
    let r = random_request(rng);
    let wrong = rng.random_bool(0.1);
    let descriptors: Vec<serde_json::Value> = r
        .descriptors
        .iter()
        .map(|d| {
            let entries: Vec<serde_json::Value> = d
                .entries
                .iter()
                .map(|e| serde_json::json!({"key": e.key, "value": e.value}))
                .collect();
            let mut v = serde_json::json!({ "entries": entries });
            if let Some(l) = &d.limit {
                v["limit"] =
                    serde_json::json!({"requests_per_unit": l.requests_per_unit, "unit": l.unit});
            }
            v
        })
        .collect();
    let hits = if wrong {
        serde_json::json!("many")
    } else {
        serde_json::json!(r.hits_addend)
    };
    let key = if rng.random_bool(0.5) {
        "hits_addend"
    } else {
        "hitsAddend"
    };
    serde_json::json!({"domain": r.domain, "descriptors": descriptors, key: hits})
        .to_string()
        .into_bytes()
}

fn descriptor(pairs: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: pairs
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

fn main() {
    let cases: usize = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // Panics are counted, not printed with a backtrace each.
    std::panic::set_hook(Box::new(|_| {}));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let live = LiveConfig::new();
    let config = load(
        &[
            ConfigFile::new("example.yaml", CONFIG),
            ConfigFile::new("algorithms.yaml", ALGORITHMS),
        ],
        false,
    )
    .expect("the examples load");
    live.publish(Arc::new(config));
    let clock = Arc::new(SystemClock);
    let engine = runtime.block_on(async {
        Engine::new(
            live,
            Arc::new(MemoryStore::new(clock.clone())),
            clock,
            EngineOptions::default(),
            None,
            Arc::new(Stats::new()),
        )
    });
    // How many cases got as far as a decision, and a config that loaded:
    // the mutations must reach past the decoders to test what follows.
    let decided = std::cell::Cell::new(0usize);
    let loaded = std::cell::Cell::new(0usize);
    let decide = |request: RateLimitRequest| {
        decided.set(decided.get() + 1);
        let _ = runtime.block_on(engine.should_rate_limit(&request));
    };

    // The wire request.
    let requests: Vec<Vec<u8>> = [
        pb::RateLimitRequest {
            domain: "rl".into(),
            descriptors: vec![descriptor(&[("category", "account")])],
            hits_addend: 1,
        },
        pb::RateLimitRequest {
            domain: "rl".into(),
            descriptors: vec![
                descriptor(&[("foo", "x"), ("bar", "bkthomps")]),
                descriptor(&[("key", "value")]),
            ],
            hits_addend: 0,
        },
    ]
    .iter()
    .map(Message::encode_to_vec)
    .collect();
    let grpc = fuzz(
        1,
        cases * 2 / 5,
        &requests,
        2,
        |rng, case| match case % 4 {
            0 => requests[case % requests.len()].clone(),
            _ => random_request(rng).encode_to_vec(),
        },
        |bytes| {
            if let Ok(r) = pb::RateLimitRequest::decode(bytes) {
                decide(RateLimitRequest::from(r));
            }
        },
    );

    // The `/json` body.
    let bodies: Vec<Vec<u8>> = [
        r#"{"domain":"rl","descriptors":[{"entries":[{"key":"category","value":"account"}]}]}"#,
        r#"{"domain":"rl","hits_addend":2,"descriptors":[{"entries":[{"key":"foo","value":"x"},{"key":"bar","value":"y"}],"limit":{"requests_per_unit":5,"unit":"SECOND"}}]}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let json = fuzz(
        2,
        cases * 2 / 5,
        &bodies,
        2,
        |rng, case| match case % 4 {
            0 => bodies[case % bodies.len()].clone(),
            _ => random_json(rng),
        },
        |bytes| {
            if let Ok(r) = ratelimit::service::http::json::parse_request(bytes) {
                decide(r);
            }
        },
    );

    // The config loader.
    let configs: Vec<Vec<u8>> = [CONFIG, ALGORITHMS]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    let loader = fuzz(
        3,
        cases / 5,
        &configs,
        3,
        |_, case| configs[case % configs.len()].clone(),
        |bytes| {
            if load(&[ConfigFile::new("f.yaml", bytes.to_vec())], false).is_ok() {
                loaded.set(loaded.get() + 1);
            }
        },
    );

    let _ = std::panic::take_hook();
    let panics = grpc + json + loader;
    println!(
        "fuzz: {cases} cases (request decoder {}, /json {}, config loader {}): {} reached a decision, {} configs loaded, {panics} panics",
        cases * 2 / 5,
        cases * 2 / 5,
        cases / 5,
        decided.get(),
        loaded.get()
    );
    println!("{} passed, {panics} failed", cases - panics);
    if panics > 0 {
        std::process::exit(1);
    }
}
