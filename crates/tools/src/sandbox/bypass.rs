//! Grants to run one call outside the sandbox.

use super::*;

/// Calls the session's approver allowed to run outside the sandbox, once each: an approver
/// that offers "run this once outside the sandbox" grants the call, the tools take the grant
/// when the call runs.
#[derive(Clone, Debug, Default)]
pub struct SandboxBypass {
    granted: Arc<Mutex<HashSet<(String, String)>>>,
}

impl SandboxBypass {
    /// A bypass set with nothing granted.
    pub fn new() -> SandboxBypass {
        SandboxBypass::default()
    }

    /// Lets the `exec_command` call `tool_call_id` with these exact `arguments` run once
    /// outside the sandbox.
    pub fn grant(&self, tool_call_id: &str, arguments: &str) {
        self.lock()
            .insert((tool_call_id.to_owned(), arguments.to_owned()));
    }

    /// Whether this call was granted; the grant is used up.
    pub fn take(&self, tool_call_id: &str, arguments: &str) -> bool {
        self.lock()
            .remove(&(tool_call_id.to_owned(), arguments.to_owned()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String)>> {
        self.granted.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PartialEq for SandboxBypass {
    fn eq(&self, other: &SandboxBypass) -> bool {
        Arc::ptr_eq(&self.granted, &other.granted)
    }
}

impl Eq for SandboxBypass {}
