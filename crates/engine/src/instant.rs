//! Same-instant ordering: what a turn's producers emit at one instant of a paused clock, in the
//! order the reference emits it.
//!
//! On a paused clock (a scenario replay) many things happen at the same instant: a tool whose
//! output is ready at dispatch and the model's zero-delay continuation, or every waiting tool
//! and the waiting model closing at an interrupt. The reference runs each producer as a chain
//! of promise jobs, and its job queue interleaves those chains by how many jobs each took to
//! get to a message. Tokio's task order is unrelated, so with [`EngineConfig::same_instant_order`]
//! the turn holds what its producers emit while the clock stands still, and releases it sorted
//! by that count (the *depth*), then by the order in which the chains were scheduled.
//!
//! The costs below are the number of jobs the reference takes from one message of a chain to
//! the next (measured by running the reference implementation with a job counter). A chain
//! woken by
//! a timer or by the interrupt starts at [`WAKE`]. Each timer runs to the end of its jobs
//! before the next timer fires, so chains woken by timers at one instant form separate waves,
//! in the order they started waiting; the interrupt wakes every waiting chain in one wave, its
//! abort listeners running in the order they were added, which is again the order the chains
//! started waiting. A tool dispatched at an instant belongs to its driver's wave and is
//! scheduled just before the driver, whose job started it.
//!
//! With the option off (real time), every message is handed over as it comes.
//!
//! [`EngineConfig::same_instant_order`]: crate::EngineConfig::same_instant_order

use std::sync::{Arc, Mutex, MutexGuard};

use penguin_llm_providers::CancellationToken;
use penguin_merge_queue::Producer;
use penguin_omni_protocol::OmniMessage;
use tokio::time::Instant;

use crate::shared::{emit, Item, Shared};

/// Depth of a chain woken by a timer or by the interrupt, before its first message.
const WAKE: i64 = -1;
/// A message a producer streams, after its previous one.
pub(crate) const MESSAGE: i64 = 4;
/// A message a producer adds to close a segment its stream left open.
pub(crate) const CLOSURE: i64 = 5;
/// `request_end`, after the model's last message.
pub(crate) const REQUEST_END: i64 = 6;
/// `approval_decision`, after its tool_call.
pub(crate) const APPROVAL: i64 = 3;
/// A denial's output, after its approval_decision.
pub(crate) const DENIAL: i64 = 2;
/// A record written right after the message that caused it.
pub(crate) const SAME_JOB: i64 = 0;
/// Where a chain stands once its next step is known to come after everything else at this
/// instant (the driver waiting on an approval the interrupt cut short: the reference goes on
/// only when the approver answers, at a later instant).
const AFTER_ALL: i64 = i64::MAX / 4;

/// One producer's chain of jobs within a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chain(usize);

/// Where a chain stood when it last acted, which is when it started waiting: (instant number,
/// its wave's place in that instant, depth, its place among the chains of that instant).
/// Chains woken together are scheduled in this order.
type Stand = (u64, usize, i64, usize);

#[derive(Debug)]
struct ChainState {
    /// Instant number and depth of the chain's last step.
    at: (u64, i64),
    /// The wave it belongs to at that instant.
    wave: Wave,
    /// Where it stood when that instant ended.
    stand: Stand,
}

/// What woke a chain at an instant: its own timer (or its dispatch), or the interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wave {
    Interrupt,
    Timer(Chain),
}

enum Entry {
    Stream(OmniMessage),
    TraceOnly(OmniMessage),
}

struct Held {
    wave: Wave,
    depth: i64,
    chain: Chain,
    entry: Entry,
}

struct Inner {
    instant: Option<Instant>,
    number: u64,
    /// Chains that acted at the current instant, in scheduling order, each with the stand it
    /// was woken from (a dispatched tool shares its driver's).
    order: Vec<(Chain, Stand)>,
    held: Vec<Held>,
    chains: Vec<ChainState>,
}

/// A turn's same-instant orderer, shared by its driver and its tools.
pub(crate) struct Orderer {
    enabled: bool,
    producer: Producer<Item>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    inner: Mutex<Inner>,
}

impl Orderer {
    pub(crate) fn new(
        shared: Arc<Shared>,
        producer: Producer<Item>,
        cancel: CancellationToken,
    ) -> Orderer {
        Orderer {
            enabled: shared.config.same_instant_order,
            producer,
            shared,
            cancel,
            inner: Mutex::new(Inner {
                instant: None,
                number: 0,
                order: Vec::new(),
                held: Vec::new(),
                chains: Vec::new(),
            }),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The driver's chain, which starts the turn.
    pub(crate) fn driver(&self) -> Chain {
        let mut inner = self.inner();
        self.enter(&mut inner);
        let chain = Chain(inner.chains.len());
        let number = inner.number;
        let stand = (number, 0, 0, 0);
        inner.chains.push(ChainState {
            at: (number, 0),
            wave: Wave::Timer(chain),
            stand,
        });
        inner.order.push((chain, stand));
        chain
    }

    /// A tool's chain, started by `parent`'s current job: it runs first at each depth.
    pub(crate) fn fork(&self, parent: Chain) -> Chain {
        let mut inner = self.inner();
        self.enter(&mut inner);
        let chain = Chain(inner.chains.len());
        let ChainState { at, wave, stand } = inner.chains[parent.0];
        inner.chains.push(ChainState { at, wave, stand });
        if at.0 == inner.number {
            let pos = inner.order.iter().position(|(c, _)| *c == parent);
            if let Some(pos) = pos {
                let stand = inner.order[pos].1;
                inner.order.insert(pos, (chain, stand));
            }
        }
        chain
    }

    /// `chain` goes on only after everything else at this instant.
    pub(crate) fn defer(&self, chain: Chain) {
        if !self.enabled {
            return;
        }
        let mut inner = self.inner();
        self.enter(&mut inner);
        self.wake(&mut inner, chain);
        let number = inner.number;
        inner.chains[chain.0].at = (number, AFTER_ALL);
    }

    /// Streams and records `msg` as `chain`'s next step, `cost` jobs after its previous one.
    pub(crate) fn push(&self, chain: Chain, msg: OmniMessage, cost: i64) {
        if !self.enabled {
            emit(&self.producer, msg);
            return;
        }
        self.hold(chain, Entry::Stream(msg), cost);
    }

    /// Records `msg` without streaming it, in its place among `chain`'s steps.
    pub(crate) fn record_only(&self, chain: Chain, msg: OmniMessage) {
        if !self.enabled {
            self.shared.record_only(msg);
            return;
        }
        self.hold(chain, Entry::TraceOnly(msg), SAME_JOB);
    }

    /// Releases everything held: the turn's producers are done.
    pub(crate) fn flush(&self) {
        let mut inner = self.inner();
        self.release(&mut inner);
    }

    fn hold(&self, chain: Chain, entry: Entry, cost: i64) {
        let mut inner = self.inner();
        self.enter(&mut inner);
        self.wake(&mut inner, chain);
        let depth = inner.chains[chain.0].at.1 + cost;
        let number = inner.number;
        inner.chains[chain.0].at = (number, depth);
        let wave = inner.chains[chain.0].wave;
        inner.held.push(Held {
            wave,
            depth,
            chain,
            entry,
        });
    }

    /// Moves to the clock's current instant. Time only moves on a paused clock once every
    /// task is idle, so whatever is held from an earlier instant is complete and can go.
    fn enter(&self, inner: &mut Inner) {
        let now = Instant::now();
        if inner.instant == Some(now) {
            return;
        }
        self.release(inner);
        let order = std::mem::take(&mut inner.order);
        for (rank, (chain, _)) in order.iter().enumerate() {
            let state = &inner.chains[chain.0];
            let stand = (state.at.0, wave_rank(&order, state.wave), state.at.1, rank);
            inner.chains[chain.0].stand = stand;
        }
        inner.instant = Some(now);
        inner.number += 1;
    }

    /// A chain's first step at this instant: it joins the scheduling order after the chains
    /// that started waiting before it did.
    fn wake(&self, inner: &mut Inner, chain: Chain) {
        let state = &inner.chains[chain.0];
        if state.at.0 == inner.number {
            return;
        }
        let stand = state.stand;
        let pos = inner
            .order
            .iter()
            .position(|(_, s)| *s > stand)
            .unwrap_or(inner.order.len());
        inner.order.insert(pos, (chain, stand));
        let number = inner.number;
        let state = &mut inner.chains[chain.0];
        state.at = (number, WAKE);
        state.wave = if self.cancel.is_cancelled() {
            Wave::Interrupt
        } else {
            Wave::Timer(chain)
        };
    }

    fn release(&self, inner: &mut Inner) {
        if inner.held.is_empty() {
            return;
        }
        let mut held = std::mem::take(&mut inner.held);
        let order = &inner.order;
        // Stable: one chain's steps at one depth keep the order they were taken in.
        held.sort_by_key(|h| (wave_rank(order, h.wave), h.depth, rank(order, h.chain)));
        for h in held {
            match h.entry {
                Entry::Stream(msg) => emit(&self.producer, msg),
                Entry::TraceOnly(msg) => self.shared.record_only(msg),
            }
        }
    }
}

/// A chain's place in an instant's scheduling order.
fn rank(order: &[(Chain, Stand)], chain: Chain) -> usize {
    order
        .iter()
        .position(|(c, _)| *c == chain)
        .unwrap_or(usize::MAX)
}

/// A wave's place in an instant: the interrupt's first, then each timer's in the order their
/// chains started waiting.
fn wave_rank(order: &[(Chain, Stand)], wave: Wave) -> usize {
    match wave {
        Wave::Interrupt => 0,
        Wave::Timer(root) => rank(order, root).saturating_add(1),
    }
}
