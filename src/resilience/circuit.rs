//! The state machine of one store node's circuit breaker: pure, with time
//! passed in, so every transition is unit-tested without I/O.
//!
//! ```text
//!            threshold consecutive failures
//!   Closed ───────────────────────────────▶ Open ◀──────────┐
//!     ▲                                      │ cooldown over │ probe failed
//!     │ probe succeeded                      ▼               │
//!     └─────────────────────────────────── Probing ──────────┘
//! ```
//!
//! Invariants:
//! - while Open, nothing is sent ([`Admit::Refuse`] carries the time until
//!   the next probe);
//! - after the cooldown exactly one request is let through as the probe;
//!   the others are refused until it answers. A probe that never answers
//!   (its caller went away) is replaced by a new one after another
//!   cooldown, so the circuit cannot stay stuck half-open;
//! - only the probe's outcome moves a probing circuit: late answers of
//!   calls sent before the circuit opened are ignored;
//! - a success while closed resets the count: failures must be consecutive;
//! - a call whose caller went away before its answer counts as a failure at
//!   the instant it would have timed out, unless the node answered a call
//!   sent at or after it in the meantime ([`Circuit::record_abandoned`]):
//!   callers that give up first cannot keep a dead node's circuit closed.

use std::time::Duration;

/// Whether a request may go to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Closed: send.
    Send,
    /// Half-open: send, as the one probe.
    Probe,
    /// Open (or a probe is out): do not send; the node is tried again in
    /// `retry_after` at the latest.
    Refuse {
        /// Time until the next probe may go.
        retry_after: Duration,
    },
}

/// A transition worth telling the operator about, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Closed → Open.
    Opened,
    /// Probing → Closed.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed { failures: u32 },
    Open { until: Duration },
    Probing { since: Duration },
}

/// One node's breaker. `now` is any monotonic time (the caller's origin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circuit {
    threshold: u32,
    cooldown: Duration,
    state: State,
    /// When the node last answered a call.
    last_success: Option<Duration>,
}

impl Circuit {
    /// A closed circuit that opens after `threshold` (≥ 1) consecutive
    /// failures and probes `cooldown` after opening.
    pub fn new(threshold: u32, cooldown: Duration) -> Circuit {
        Circuit {
            threshold: threshold.max(1),
            cooldown,
            state: State::Closed { failures: 0 },
            last_success: None,
        }
    }

    /// Whether a request may be sent at `now`; may start a probe.
    pub fn admit(&mut self, now: Duration) -> Admit {
        match self.state {
            State::Closed { .. } => Admit::Send,
            State::Open { until } if now >= until => {
                self.state = State::Probing { since: now };
                Admit::Probe
            }
            State::Open { until } => Admit::Refuse {
                retry_after: until - now,
            },
            State::Probing { since } if now >= since + self.cooldown => {
                self.state = State::Probing { since: now };
                Admit::Probe
            }
            State::Probing { since } => Admit::Refuse {
                retry_after: (since + self.cooldown).saturating_sub(now),
            },
        }
    }

    /// Records the outcome of a request that [`Circuit::admit`] let through
    /// (`probe`: it was admitted as the probe).
    pub fn record(&mut self, success: bool, probe: bool, now: Duration) -> Option<Change> {
        if success {
            self.last_success = Some(now);
        }
        match (self.state, success) {
            (State::Closed { .. }, true) => {
                self.state = State::Closed { failures: 0 };
                None
            }
            (State::Closed { failures }, false) => {
                let failures = failures.saturating_add(1);
                if failures >= self.threshold {
                    self.state = State::Open {
                        until: now + self.cooldown,
                    };
                    Some(Change::Opened)
                } else {
                    self.state = State::Closed { failures };
                    None
                }
            }
            (State::Probing { .. }, true) if probe => {
                self.state = State::Closed { failures: 0 };
                Some(Change::Closed)
            }
            (State::Probing { .. }, false) if probe => {
                self.state = State::Open {
                    until: now + self.cooldown,
                };
                None
            }
            // Late answers of calls sent before the circuit opened.
            _ => None,
        }
    }

    /// Records, at `now` (when it would have timed out), a call sent at
    /// `sent` whose caller stopped waiting before it was answered: a
    /// failure, unless the node answered some call at or after `sent`.
    pub fn record_abandoned(
        &mut self,
        sent: Duration,
        probe: bool,
        now: Duration,
    ) -> Option<Change> {
        if self.last_success.is_some_and(|at| at >= sent) {
            return None;
        }
        self.record(false, probe, now)
    }

    /// Whether requests are being held back (open or probing).
    pub fn is_open(&self) -> bool {
        !matches!(self.state, State::Closed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const COOLDOWN: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn opens_after_consecutive_failures_only() {
        let mut c = Circuit::new(3, COOLDOWN);
        assert_eq!(c.record(false, false, ms(0)), None);
        assert_eq!(c.record(false, false, ms(1)), None);
        assert_eq!(c.record(true, false, ms(2)), None, "a success resets");
        assert_eq!(c.record(false, false, ms(3)), None);
        assert_eq!(c.record(false, false, ms(4)), None);
        assert!(!c.is_open());
        assert_eq!(c.record(false, false, ms(5)), Some(Change::Opened));
        assert!(c.is_open());
        assert_eq!(
            c.admit(ms(5)),
            Admit::Refuse {
                retry_after: COOLDOWN
            }
        );
        assert_eq!(
            c.admit(ms(505)),
            Admit::Refuse {
                retry_after: ms(500)
            }
        );
    }

    #[test]
    fn an_abandoned_call_fails_unless_the_node_answered_since_it_was_sent() {
        let mut c = Circuit::new(2, COOLDOWN);
        assert_eq!(c.record(true, false, ms(10)), None);
        // Sent at 5, before the success at 10: the node answers.
        assert_eq!(c.record_abandoned(ms(5), false, ms(55)), None);
        assert_eq!(c.record_abandoned(ms(10), false, ms(60)), None);
        assert!(!c.is_open());
        // Sent after the last success, and nothing answered since.
        assert_eq!(c.record_abandoned(ms(20), false, ms(70)), None);
        assert_eq!(
            c.record_abandoned(ms(21), false, ms(71)),
            Some(Change::Opened)
        );
        assert!(c.is_open());
    }

    #[test]
    fn an_abandoned_probe_reopens_the_circuit() {
        let mut c = Circuit::new(1, COOLDOWN);
        assert_eq!(c.record(false, false, ms(0)), Some(Change::Opened));
        assert_eq!(c.admit(ms(1_000)), Admit::Probe);
        assert_eq!(c.record_abandoned(ms(1_000), true, ms(1_050)), None);
        assert_eq!(
            c.admit(ms(1_100)),
            Admit::Refuse {
                retry_after: ms(950)
            }
        );
    }

    #[test]
    fn one_probe_after_the_cooldown_and_its_success_closes() {
        let mut c = Circuit::new(1, COOLDOWN);
        assert_eq!(c.record(false, false, ms(0)), Some(Change::Opened));
        assert_eq!(c.admit(ms(1_000)), Admit::Probe);
        // While the probe is out, everyone else is refused.
        assert_eq!(
            c.admit(ms(1_010)),
            Admit::Refuse {
                retry_after: ms(990)
            }
        );
        // A late answer of an old call does not close it.
        assert_eq!(c.record(true, false, ms(1_020)), None);
        assert!(c.is_open());
        assert_eq!(c.record(true, true, ms(1_030)), Some(Change::Closed));
        assert!(!c.is_open());
        assert_eq!(c.admit(ms(1_031)), Admit::Send);
    }

    #[test]
    fn a_failed_probe_reopens_for_another_cooldown_silently() {
        let mut c = Circuit::new(1, COOLDOWN);
        c.record(false, false, ms(0));
        assert_eq!(c.admit(ms(1_000)), Admit::Probe);
        assert_eq!(c.record(false, true, ms(1_050)), None, "no second 'opened'");
        assert_eq!(
            c.admit(ms(1_100)),
            Admit::Refuse {
                retry_after: ms(950)
            }
        );
        assert_eq!(c.admit(ms(2_050)), Admit::Probe);
    }

    #[test]
    fn a_lost_probe_is_replaced_after_a_cooldown() {
        let mut c = Circuit::new(1, COOLDOWN);
        c.record(false, false, ms(0));
        assert_eq!(c.admit(ms(1_000)), Admit::Probe);
        // Its caller went away: no outcome is ever recorded.
        assert!(matches!(c.admit(ms(1_999)), Admit::Refuse { .. }));
        assert_eq!(c.admit(ms(2_000)), Admit::Probe);
    }

    #[test]
    fn late_failures_while_open_do_not_extend_it() {
        let mut c = Circuit::new(2, COOLDOWN);
        c.record(false, false, ms(0));
        c.record(false, false, ms(10));
        for t in 11..50 {
            assert_eq!(c.record(false, false, ms(t)), None);
        }
        assert_eq!(c.admit(ms(1_010)), Admit::Probe);
    }

    proptest! {
        /// Whatever happens, an open circuit never sends before its
        /// cooldown is over, never lets two probes out within one
        /// cooldown, and every refusal names a wait no longer than the
        /// cooldown.
        #[test]
        fn never_sends_while_open(events in prop::collection::vec((0u64..300, any::<bool>(), any::<bool>()), 1..200)) {
            let mut c = Circuit::new(3, COOLDOWN);
            let mut now = Duration::ZERO;
            let mut opened_at: Option<Duration> = None;
            let mut last_probe: Option<Duration> = None;
            for (step, admit_it, success) in events {
                now += ms(step);
                if admit_it {
                    match c.admit(now) {
                        Admit::Send => prop_assert!(opened_at.is_none()),
                        Admit::Probe => {
                            let opened = opened_at.expect("a probe only when open");
                            prop_assert!(now >= opened + COOLDOWN);
                            if let Some(p) = last_probe {
                                prop_assert!(now >= p + COOLDOWN);
                            }
                            last_probe = Some(now);
                            if let Some(Change::Closed) = c.record(success, true, now) {
                                opened_at = None;
                                last_probe = None;
                            } else if !success {
                                opened_at = Some(now);
                                last_probe = None;
                            }
                        }
                        Admit::Refuse { retry_after } => {
                            prop_assert!(opened_at.is_some());
                            prop_assert!(retry_after <= COOLDOWN);
                        }
                    }
                } else if c.record(success, false, now) == Some(Change::Opened) {
                    opened_at = Some(now);
                }
                prop_assert_eq!(c.is_open(), opened_at.is_some());
            }
        }
    }
}
