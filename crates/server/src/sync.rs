//! Taking the server's std mutexes.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, poisoned or not: every critical section leaves the data consistent, so a panic
/// elsewhere must not take the session down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
