#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures_core::Stream;

type Hook<T> = Box<dyn FnMut(&T) + Send>;

struct State<T> {
    items: VecDeque<T>,
    producers: usize,
    consumer_alive: bool,
    waker: Option<Waker>,
    hook: Option<Hook<T>>,
}

struct Shared<T> {
    state: Mutex<State<T>>,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic inside a hook poisons the lock; the queue's own state is still consistent
        // (each mutation is a single step), so keep going rather than cascade the panic.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Creates a queue with one producer.
pub fn merge_queue<T>() -> (Producer<T>, Consumer<T>) {
    build(None)
}

/// Creates a queue whose `hook` runs for each item as it enters the queue, in queue order.
///
/// The hook runs under the queue's lock: keep it short (hand the item to another queue, bump a
/// counter) and never push to the same queue from it.
pub fn merge_queue_with_hook<T>(
    hook: impl FnMut(&T) + Send + 'static,
) -> (Producer<T>, Consumer<T>) {
    build(Some(Box::new(hook)))
}

fn build<T>(hook: Option<Hook<T>>) -> (Producer<T>, Consumer<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            producers: 1,
            consumer_alive: true,
            waker: None,
            hook,
        }),
    });
    (
        Producer {
            shared: shared.clone(),
        },
        Consumer { shared },
    )
}

/// A handle that pushes items. Clone it for each concurrent producer.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Producer<T> {
    /// Appends `item`, running the hook first. Never waits.
    ///
    /// Returns `false` when the consumer is gone: the hook still ran (a sink keeps its record),
    /// but the item was dropped.
    pub fn push(&self, item: T) -> bool {
        let waker = {
            let mut st = self.shared.lock();
            if let Some(hook) = st.hook.as_mut() {
                hook(&item);
            }
            if !st.consumer_alive {
                return false;
            }
            st.items.push_back(item);
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    /// True while the consumer exists.
    pub fn is_consumer_alive(&self) -> bool {
        self.shared.lock().consumer_alive
    }
}

impl<T> Clone for Producer<T> {
    fn clone(&self) -> Self {
        self.shared.lock().producers += 1;
        Producer {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Producer<T> {
    fn drop(&mut self) {
        let waker = {
            let mut st = self.shared.lock();
            st.producers -= 1;
            if st.producers == 0 {
                st.waker.take()
            } else {
                None
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Producer")
            .field("producers", &st.producers)
            .field("queued", &st.items.len())
            .finish()
    }
}

/// Why [`Consumer::try_next`] returned no item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TryNextError {
    /// Nothing is queued, but a producer lives: an item may still come.
    Empty,
    /// Every producer is gone and every item was taken: the stream has ended.
    Closed,
}

impl fmt::Display for TryNextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TryNextError::Empty => "the merge queue is empty, and a producer may still push",
            TryNextError::Closed => "the merge queue is closed: every producer is gone",
        })
    }
}

impl std::error::Error for TryNextError {}

/// The single consumer: a [`Stream`] of items in arrival order.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Consumer<T> {
    /// Takes the next item without waiting, or says why there is none: [`TryNextError::Empty`]
    /// while a producer lives (one may still push), [`TryNextError::Closed`] once every
    /// producer is gone and the queue has drained (the end of the stream).
    ///
    /// ```
    /// use penguin_merge_queue::{merge_queue, TryNextError};
    ///
    /// let (producer, mut consumer) = merge_queue::<u32>();
    /// assert_eq!(consumer.try_next(), Err(TryNextError::Empty));
    /// producer.push(7);
    /// drop(producer);
    /// assert_eq!(consumer.try_next(), Ok(7));
    /// assert_eq!(consumer.try_next(), Err(TryNextError::Closed));
    /// ```
    pub fn try_next(&mut self) -> Result<T, TryNextError> {
        let mut st = self.shared.lock();
        match st.items.pop_front() {
            Some(item) => Ok(item),
            None if st.producers == 0 => Err(TryNextError::Closed),
            None => Err(TryNextError::Empty),
        }
    }

    /// Live producers right now.
    pub fn producers(&self) -> usize {
        self.shared.lock().producers
    }
}

impl<T> Stream for Consumer<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut st = self.shared.lock();
        if let Some(item) = st.items.pop_front() {
            return Poll::Ready(Some(item));
        }
        if st.producers == 0 {
            return Poll::Ready(None);
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T> Drop for Consumer<T> {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.consumer_alive = false;
        st.items.clear();
    }
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Consumer")
            .field("producers", &st.producers)
            .field("queued", &st.items.len())
            .finish()
    }
}
