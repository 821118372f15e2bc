//! Steering a running task and recalling what has not been delivered yet: steering inputs and
//! queued follow-ups (protocol [§5.4](penguin_omni_protocol::spec#s5.4) *Session state and
//! concurrency* and [§5.5](penguin_omni_protocol::spec#s5.5) *Running a task*).

use penguin_engine::{Steered, ThinkingLevel};
use penguin_omni_protocol::build;
use penguin_sse_transport::{PendingInput, SessionStatus};

use crate::entry::{random_id, Entry};
use crate::error::ApiError;
use crate::sessions::Sessions;
use crate::sync::lock;

fn not_running() -> ApiError {
    ApiError::conflict("not_running", "no task is running in this session")
}

impl Sessions {
    /// `POST /steer`: returns the id to recall it with.
    pub(crate) fn steer(&self, entry: &Entry, text: String) -> Result<String, ApiError> {
        let _p = lock(&entry.publish);
        {
            let rt = entry.rt();
            if rt.status != SessionStatus::Running {
                return Err(not_running());
            }
            rt.admit_pending(rt.steering.len(), text.len())?;
        }
        let steered = entry
            .session()
            .engine()
            .steer(vec![build::user_text(text.clone())]);
        match steered {
            Steered::Queued(steer_id) => {
                let id = random_id();
                entry.rt().steering.push_back((
                    PendingInput {
                        id: id.clone(),
                        text,
                        images: 0,
                        files: 0,
                    },
                    steer_id,
                ));
                self.publish_task_state_locked(entry);
                Ok(id)
            }
            Steered::Empty => Err(ApiError::field("text", "non-blank text")),
            Steered::NotRunning => Err(not_running()),
        }
    }

    /// `DELETE /steer/:steerId`: recalls a steering input not delivered yet.
    pub(crate) fn unsteer(&self, entry: &Entry, id: &str) -> Result<PendingInput, ApiError> {
        let _p = lock(&entry.publish);
        let not_pending = || {
            ApiError::conflict(
                "not_pending",
                format!("steering {id:?} is not pending (already delivered, or unknown)"),
            )
        };
        let (mirror, steer_id) = {
            let rt = entry.rt();
            let (p, s) = rt
                .steering
                .iter()
                .find(|(p, _)| p.id == id)
                .ok_or_else(not_pending)?;
            (p.clone(), *s)
        };
        if !entry.session().engine().unsteer(steer_id) {
            return Err(not_pending());
        }
        entry.rt().steering.retain(|(p, _)| p.id != id);
        self.publish_task_state_locked(entry);
        Ok(mirror)
    }

    /// `DELETE /follow-ups/:id`: removes a queued follow-up; returns its mirror and thinking
    /// level.
    pub(crate) fn remove_follow_up(
        &self,
        entry: &Entry,
        id: &str,
    ) -> Result<(PendingInput, Option<ThinkingLevel>), ApiError> {
        let _p = lock(&entry.publish);
        let removed = {
            let mut rt = entry.rt();
            let pos = rt
                .follow_ups
                .iter()
                .position(|f| f.mirror.id == id)
                .ok_or_else(|| {
                    ApiError::conflict(
                        "not_pending",
                        format!("follow-up {id:?} is not queued (already started, or unknown)"),
                    )
                })?;
            rt.follow_ups.remove(pos)
        };
        self.publish_task_state_locked(entry);
        let f = removed.ok_or_else(|| ApiError::internal("follow-up vanished under its lock"))?;
        Ok((f.mirror, f.thinking))
    }
}
