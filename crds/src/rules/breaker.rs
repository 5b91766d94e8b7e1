//! The circuit breaker's rule (CONTRACT §6), shared by the dispatcher (its own runs) and the
//! operator (the runs of every dispatcher merged by time). Pure: values in, decision out,
//! no clock and no I/O; times are milliseconds since the Unix epoch, passed by the caller.
//!
//! The breaker guards against a **failing handler**, never against a policy that refuses:
//! - only *faults* count: a `timeout` or an `error` of the handler (crash, spawn failure, an
//!   exit other than 0 and 2, HTTP 4xx/5xx or a transport failure after the retry, an
//!   unusable answer, a provider failure);
//! - a handler's *answer*, `allow` or `block`, ends the run: a policy's `block` is the hook
//!   working (the seed counted blocks, which let an agent switch a guard off by retrying a
//!   refused call five times);
//! - [`FAULT_THRESHOLD`] faults in a row, the first and the last within [`WINDOW_MS`], trip it;
//! - **open**: the handler is not run; every event the hook would run on is answered at once
//!   ([`Admission::Refuse`]) as an `error` of the hook: `block` on a blocking event, whatever
//!   `onTimeout` says. An open breaker cannot know what the handler would have answered,
//!   and a caller can choose inputs that make a handler slow: answering as a timeout would
//!   let `onTimeout: allow` pass calls the handler refuses (found in review). `fail_closed`
//!   only records whether the tripping run had an error (status and Events show it);
//! - a timeout cut short by the chain budget is not a fault of the hook that was cut
//!   ([`RunClass::Cut`]): another hook spent the budget; nor is a run the shared command
//!   runner had no room for (another tenant's load); a probe cut short gives its slot back;
//! - **half-open**: [`HALF_OPEN_AFTER_MS`] after it opened, one event runs the handler as a
//!   probe ([`Admission::Probe`]); an answer closes the breaker, a fault opens it for
//!   another [`HALF_OPEN_AFTER_MS`]. A probe that never reports back (its run was lost) is
//!   replaced by another one after [`HALF_OPEN_AFTER_MS`].
//!
//! A breaker is kept per hook version *and per tenant* (CONTRACT §6.3): one tenant's inputs
//! never change what another tenant's agents get from a global hook.

use std::collections::VecDeque;

/// Faults in a row that trip a breaker (seed: 5).
pub const FAULT_THRESHOLD: usize = 5;
/// Most time, in milliseconds, between the first and the last fault of a tripping run (seed:
/// one minute).
pub const WINDOW_MS: i64 = 60_000;
/// Milliseconds an open breaker waits before it lets one probe run the handler (CONTRACT
/// §6.4: 30 s).
pub const HALF_OPEN_AFTER_MS: i64 = 30_000;
/// Reason of a decision taken by an open breaker.
pub const REASON_CIRCUIT_OPEN: &str = "CircuitOpen";

/// How a handler run counts for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunClass {
    /// The handler answered (`allow` or `block`): the handler works.
    Answer,
    /// The handler failed.
    Fault(FaultKind),
    /// The run says nothing of the handler: a timeout cut short by the chain budget
    /// (another hook spent it), or a handler that never started because the shared command
    /// runner was busy or unreachable. It neither counts nor ends a run of faults; a probe
    /// cut short gives its slot back, so the next event probes again.
    Cut,
}

/// The kind of a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// No answer within the hook's timeout.
    Timeout,
    /// Any other failure (CONTRACT §6.1).
    Error,
}

/// Whether a run of faults trips the breaker: at least [`FAULT_THRESHOLD`] of them, and the
/// newest [`FAULT_THRESHOLD`] (by time) span at most [`WINDOW_MS`]. `times` is in
/// milliseconds, in any order. The one trip rule of the dispatcher and the operator.
pub fn run_trips(times: &[i64]) -> Option<i64> {
    if times.len() < FAULT_THRESHOLD {
        return None;
    }
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let newest = &sorted[sorted.len() - FAULT_THRESHOLD..];
    let span = newest[FAULT_THRESHOLD - 1].saturating_sub(newest[0]);
    (span <= WINDOW_MS).then_some(span)
}

/// Whether the run that opened a breaker had an error (shown in status and Events as
/// `failClosed`). An open breaker answers as an error either way (see the module rules).
pub fn fails_closed(kinds: impl IntoIterator<Item = FaultKind>) -> bool {
    kinds.into_iter().any(|k| k == FaultKind::Error)
}

/// Why and when a breaker tripped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trip {
    /// Timeouts and errors of the tripping run (newest [`FAULT_THRESHOLD`]).
    pub timeouts: usize,
    pub errors: usize,
    /// Milliseconds from the first to the last fault of the run.
    pub over_ms: i64,
    /// When it opened (the last fault), ms since the epoch.
    pub at_ms: i64,
    /// See [`fails_closed`].
    pub fail_closed: bool,
}

impl Trip {
    /// A sentence for status, Events and logs.
    pub fn reason(&self) -> String {
        format!(
            "{} timeouts and {} errors of the handler in a row within {:.0} s (threshold {FAULT_THRESHOLD} faults within {} s; answers, allow or block, never count)",
            self.timeouts,
            self.errors,
            self.over_ms as f64 / 1000.0,
            WINDOW_MS / 1000
        )
    }
}

/// What a breaker lets an event do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: run the handler.
    Run,
    /// Half-open: run the handler as the probe.
    Probe,
    /// Open: do not run the handler; answer as an error (see the module rules).
    /// `fail_closed`: the tripping run had an error (informational); `since`: when it
    /// opened, ms.
    Refuse { fail_closed: bool, since: i64 },
}

/// What recording a run changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// Nothing the other replicas need to hear of at once.
    None,
    /// The run of faults grew or ended (`grew`: a fault was added): the merged window of the
    /// operator should hear of it soon.
    RunChanged,
    /// This fault tripped the breaker.
    Tripped(Trip),
    /// The probe answered: the breaker closed (it had been open since `since`).
    Closed { since: i64 },
    /// The probe faulted: open again from `since` (now).
    Reopened { since: i64, fail_closed: bool },
}

/// One breaker (one hook version, one tenant) on one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// The handler runs; `faults` is the current run (time ms, kind), oldest first, at most
    /// [`FAULT_THRESHOLD`]; `last_answer` the newest answer, ms (0: none).
    Closed {
        faults: VecDeque<(i64, FaultKind)>,
        last_answer: i64,
    },
    /// The handler does not run, except as a probe once `since + HALF_OPEN_AFTER_MS` passed;
    /// `probe_at`: when the probe in flight started.
    Open {
        since: i64,
        fail_closed: bool,
        probe_at: Option<i64>,
    },
}

impl Default for State {
    fn default() -> Self {
        State::Closed {
            faults: VecDeque::new(),
            last_answer: 0,
        }
    }
}

impl State {
    /// Whether the breaker is open (a probe in flight included).
    pub fn is_open(&self) -> bool {
        matches!(self, State::Open { .. })
    }

    /// What an event at `now` may do; takes the probe slot when it hands out
    /// [`Admission::Probe`].
    pub fn admit(&mut self, now: i64) -> Admission {
        match self {
            State::Closed { .. } => Admission::Run,
            State::Open {
                since,
                fail_closed,
                probe_at,
            } => {
                let due = now >= since.saturating_add(HALF_OPEN_AFTER_MS);
                let probe_free =
                    probe_at.is_none_or(|p| now >= p.saturating_add(HALF_OPEN_AFTER_MS));
                if due && probe_free {
                    *probe_at = Some(now);
                    Admission::Probe
                } else {
                    Admission::Refuse {
                        fail_closed: *fail_closed,
                        since: *since,
                    }
                }
            }
        }
    }

    /// Records a handler run admitted as `admission` that ended as `class` at `now`.
    ///
    /// - a run admitted while closed adds a fault (maybe tripping) or ends the run;
    /// - a probe's answer closes, its fault reopens;
    /// - a run admitted while closed that ends after the breaker opened meanwhile (another
    ///   run tripped it, or a snapshot opened it) changes nothing: only a probe closes;
    /// - a probe that ends after the breaker was closed meanwhile counts like a closed run;
    /// - [`Admission::Refuse`] ran no handler: nothing to record.
    pub fn record(&mut self, admission: Admission, class: RunClass, now: i64) -> Transition {
        match (admission, &mut *self) {
            (Admission::Refuse { .. }, _) => Transition::None,
            (
                Admission::Run | Admission::Probe,
                State::Closed {
                    faults,
                    last_answer,
                },
            ) => match class {
                RunClass::Answer => {
                    *last_answer = (*last_answer).max(now);
                    if faults.is_empty() {
                        Transition::None
                    } else {
                        faults.clear();
                        Transition::RunChanged
                    }
                }
                RunClass::Cut => Transition::None,
                RunClass::Fault(kind) => {
                    faults.push_back((now, kind));
                    while faults.len() > FAULT_THRESHOLD {
                        faults.pop_front();
                    }
                    let times: Vec<i64> = faults.iter().map(|(t, _)| *t).collect();
                    match run_trips(&times) {
                        None => Transition::RunChanged,
                        Some(over_ms) => {
                            let timeouts = faults
                                .iter()
                                .filter(|(_, k)| *k == FaultKind::Timeout)
                                .count();
                            let trip = Trip {
                                timeouts,
                                errors: faults.len() - timeouts,
                                over_ms,
                                at_ms: now,
                                fail_closed: fails_closed(faults.iter().map(|(_, k)| *k)),
                            };
                            *self = State::Open {
                                since: now,
                                fail_closed: trip.fail_closed,
                                probe_at: None,
                            };
                            Transition::Tripped(trip)
                        }
                    }
                }
            },
            (Admission::Run, State::Open { .. }) => Transition::None,
            (
                Admission::Probe,
                State::Open {
                    since,
                    fail_closed,
                    probe_at,
                },
            ) => match class {
                RunClass::Cut => {
                    *probe_at = None;
                    Transition::None
                }
                RunClass::Answer => {
                    let opened = *since;
                    *self = State::Closed {
                        faults: VecDeque::new(),
                        last_answer: now,
                    };
                    Transition::Closed { since: opened }
                }
                RunClass::Fault(kind) => {
                    let fail_closed = *fail_closed || kind == FaultKind::Error;
                    *self = State::Open {
                        since: now,
                        fail_closed,
                        probe_at: None,
                    };
                    Transition::Reopened {
                        since: now,
                        fail_closed,
                    }
                }
            },
        }
    }

    /// Opens the breaker from `since` (another replica tripped it, or the operator's merged
    /// window did). An open breaker that opened later stays as it is.
    pub fn open_from(&mut self, since: i64, fail_closed: bool) {
        match self {
            State::Open {
                since: s,
                fail_closed: f,
                ..
            } if *s >= since => {
                *f |= fail_closed;
            }
            _ => {
                *self = State::Open {
                    since,
                    fail_closed,
                    probe_at: None,
                };
            }
        }
    }

    /// Closes the breaker because the trip that opened it at `since` ended elsewhere (a probe
    /// on another replica answered). A breaker that opened after `since` stays open: that is
    /// a newer trip.
    pub fn close_if_opened_by(&mut self, since: i64) {
        if let State::Open { since: s, .. } = self
            && *s <= since
        {
            *self = State::default();
        }
    }
}

#[cfg(test)]
mod tests;
