//! `update_plan`: the model's checklist of steps (codex's shape). The latest plan is kept
//! with the session's tools, so a host can show it ([`BuiltinTools::plan`](crate::BuiltinTools::plan)).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::{Output, Tool, ToolOutcome, ToolResult};

/// Most steps one plan may have.
pub const MAX_STEPS: usize = 50;
/// Most chars of one step.
pub const MAX_STEP_CHARS: usize = 500;

/// Where a step stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Being worked on (at most one step at a time).
    InProgress,
    /// Done.
    Completed,
}

impl StepStatus {
    /// The checkbox a text rendering shows: `[ ]`, `[~]` or `[x]`.
    pub fn checkbox(self) -> &'static str {
        match self {
            StepStatus::Pending => "[ ]",
            StepStatus::InProgress => "[~]",
            StepStatus::Completed => "[x]",
        }
    }
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStep {
    /// What the step does, in a few words.
    pub step: String,
    /// Where it stands.
    pub status: StepStatus,
}

/// A plan as the model last set it: `update_plan`'s arguments, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Why the plan changed, when the model said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// The steps, in order.
    pub plan: Vec<PlanStep>,
}

impl Plan {
    /// The plan in an `update_plan` call's arguments (a JSON object), validated: at most
    /// [`MAX_STEPS`] steps, none empty or longer than [`MAX_STEP_CHARS`], at most one
    /// `in_progress`. A host rebuilding the plan from a session's stored calls uses this.
    pub fn from_arguments(args: Value) -> Result<Plan, String> {
        let plan: Plan = serde_json::from_value(args)
            .map_err(|e| format!("invalid arguments for update_plan: {e}"))?;
        plan.validate()?;
        Ok(plan)
    }

    fn validate(&self) -> Result<(), String> {
        if self.plan.len() > MAX_STEPS {
            return Err(format!(
                "the plan has {} steps; keep it to at most {MAX_STEPS} short steps",
                self.plan.len()
            ));
        }
        for (i, s) in self.plan.iter().enumerate() {
            if s.step.trim().is_empty() {
                return Err(format!(
                    "step {} is empty; every step says what it does",
                    i + 1
                ));
            }
            let chars = s.step.chars().count();
            if chars > MAX_STEP_CHARS {
                return Err(format!(
                    "step {} has {chars} chars; a step is a short line (at most {MAX_STEP_CHARS})",
                    i + 1
                ));
            }
        }
        let busy: Vec<String> = (self.plan.iter().enumerate())
            .filter(|(_, s)| s.status == StepStatus::InProgress)
            .map(|(i, _)| (i + 1).to_string())
            .collect();
        if busy.len() > 1 {
            return Err(format!(
                "steps {} are in_progress; at most one step may be in_progress at a time",
                busy.join(", ")
            ));
        }
        Ok(())
    }

    /// The checklist: the explanation (if any), then one `[x]`/`[~]`/`[ ]` line per step.
    pub fn checklist(&self) -> String {
        let mut lines: Vec<String> = self.explanation.iter().cloned().collect();
        lines.extend(
            self.plan
                .iter()
                .map(|s| format!("{} {}", s.status.checkbox(), s.step)),
        );
        if self.plan.is_empty() {
            lines.push("(no steps)".to_owned());
        }
        lines.join("\n")
    }
}

/// Where a session's latest plan is kept; clones share it.
#[derive(Clone, Debug, Default)]
pub(crate) struct PlanCell(Arc<Mutex<Option<Plan>>>);

impl PlanCell {
    pub(crate) fn get(&self) -> Option<Plan> {
        self.lock().clone()
    }

    pub(crate) fn set(&self, plan: Option<Plan>) {
        *self.lock() = plan;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Plan>> {
        // A plan is replaced whole, so one a panicking writer left is still consistent.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The `update_plan` tool.
#[derive(Debug)]
pub(crate) struct UpdatePlan {
    pub cell: PlanCell,
}

#[async_trait]
impl Tool for UpdatePlan {
    async fn run(&self, args: Value, out: Output) -> ToolResult {
        let plan = Plan::from_arguments(args)?;
        out.emit(format!("Plan updated\n{}", plan.checklist()))
            .await;
        self.cell.set(Some(plan));
        Ok(ToolOutcome::default())
    }
}
