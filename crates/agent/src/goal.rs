//! Goal mode: a task whose input is an objective, looped round after round on one session
//! until the model declares it `complete` or `blocked` in a GOAL.yaml the loop creates
//! (`docs/goal-mode.md`).
//!
//! Each round's input is a user text: a `[goal]` block (the round, the goal file and its
//! content, the budget line, the working rules) and then a body, the caller's text verbatim
//! in round 1 and the objective afterwards. The loop yields that input on the stream before
//! the round runs (a plain run never streams its prompt; the engine writes it to the Trace as
//! any prompt), so hosts see round boundaries ([`round_of`]). After a round it reads the
//! file's `status`:
//!
//! - `complete` or `blocked` (a missing or broken file, or a status it does not know, reads
//!   as `blocked`): the goal ends with that outcome;
//! - a round that ended in the main session's `abort`, or that the engine cut at `max_turns`
//!   (its last assistant text has `stop_reason: failed`), ends the goal as `aborted` without
//!   another round, the file left as the model last wrote it (the resume point);
//! - the budget (uncached input + output of every request, subagents included) checked
//!   between rounds: when spent, one wrap-up round, then `budget_limited` (or `complete`,
//!   when the model could truthfully say so);
//! - otherwise the next round, up to a backstop of [`GOAL_MAX_ROUNDS`].
//!
//! The stream's last message is exactly one `goal_finished` (outcome, rounds, tokens), which
//! is also written to the Trace.
//!
//! [`run_goal`] is the loop over any round runner (the facade's [`crate::session::Session`]
//! uses it in `Session::run_goal`, scenario files with a bare engine); [`round_of`],
//! [`finished_of`] and [`token_delta`] read a goal stream as hosts do; [`latest_goal`] rebuilds
//! the last goal's [`GoalState`] from a session's records.

mod file;
mod prompt;
mod yaml;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::stream::{self, BoxStream, StreamExt};
use penguin_engine::{CancellationToken, EngineBusy, TraceSink};
use penguin_omni_protocol::markers::{parse_goal_message, strip_leading_marker_blocks};
use penguin_omni_protocol::{
    build, Body, EventPayload, Frame, ModelPayload, OmniMessage, Role, StopReason, Timestamp,
};
use serde::{Deserialize, Serialize};

pub use penguin_omni_protocol::GoalOutcomeStatus;

use file::FileStatus;

/// The backstop on regular rounds when the caller sets none: far above any real goal, so a
/// model that never writes the goal file cannot loop forever.
pub const GOAL_MAX_ROUNDS: u64 = 100;

/// The file name of the control file.
pub const GOAL_FILE_NAME: &str = "GOAL.yaml";

/// How to run a goal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GoalOptions {
    /// Token budget (uncached input + output); `None` or `Some(0)`: unlimited.
    pub budget: Option<u64>,
    /// Regular rounds at most (the wrap-up round may run one past it); `None`:
    /// [`GOAL_MAX_ROUNDS`]; `Some(0)`: no cap.
    pub max_rounds: Option<u64>,
    /// Where GOAL.yaml goes; `None`: the session's default ([`crate::session::Session::goal_file`]).
    pub file: Option<PathBuf>,
}

/// A goal's status: `active` while it runs, then its outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalStatus {
    /// Rounds are running.
    Active,
    /// The model declared it complete.
    Complete,
    /// The model declared it blocked (or the goal file could not be read).
    Blocked,
    /// The budget ran out (after the wrap-up round).
    BudgetLimited,
    /// A round was interrupted or cut at `max_turns`, or the round backstop was reached.
    Aborted,
}

impl From<GoalOutcomeStatus> for GoalStatus {
    fn from(o: GoalOutcomeStatus) -> GoalStatus {
        match o {
            GoalOutcomeStatus::Complete => GoalStatus::Complete,
            GoalOutcomeStatus::Blocked => GoalStatus::Blocked,
            GoalOutcomeStatus::BudgetLimited => GoalStatus::BudgetLimited,
            GoalOutcomeStatus::Aborted => GoalStatus::Aborted,
        }
    }
}

/// A goal run as a host shows it (the server's `GET …/goal`, the web banner): the JSON is the
/// reference's `GoalStateView` (`{objective, status, budget, used, rounds, updatedAt}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalState {
    /// The objective (the input's text without leading marker blocks).
    pub objective: String,
    /// `active` while it runs, then the outcome.
    pub status: GoalStatus,
    /// Token budget; -1: unlimited.
    pub budget: i64,
    /// Tokens used so far (uncached input + output, subagents included).
    pub used: u64,
    /// Rounds started so far (the wrap-up round counts).
    pub rounds: u64,
    /// When this state last changed (ISO 8601, milliseconds, `Z`).
    pub updated_at: String,
}

impl GoalState {
    fn new(objective: &str, budget: Option<u64>) -> GoalState {
        GoalState {
            objective: objective.to_owned(),
            status: GoalStatus::Active,
            budget: budget_value(budget),
            used: 0,
            rounds: 0,
            updated_at: Timestamp::now().to_string(),
        }
    }
}

fn budget_value(budget: Option<u64>) -> i64 {
    match budget.filter(|&b| b > 0) {
        Some(b) => i64::try_from(b).unwrap_or(i64::MAX),
        None => -1,
    }
}

/// A goal's state shared between its loop and whoever watches it.
pub type SharedGoalState = Arc<Mutex<Option<GoalState>>>;

/// Why a goal could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GoalError {
    /// The input holds no user text: a goal needs an objective.
    #[error("goal mode requires a non-empty text objective")]
    EmptyObjective,
    /// The input holds something other than user text.
    #[error("goal mode accepts user text only (the objective)")]
    NotText,
    /// The session is running a task already.
    #[error(transparent)]
    Busy(#[from] EngineBusy),
    /// GOAL.yaml could not be written.
    #[error("cannot write the goal file {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Starts one round: its input in, its stream out.
pub type RoundRunner =
    Box<dyn FnMut(Vec<OmniMessage>) -> Result<BoxStream<'static, Frame>, EngineBusy> + Send>;

/// What a goal run is made of.
pub struct GoalRun {
    /// The input (user texts only); their text, joined, is round 1's body.
    pub input: Vec<OmniMessage>,
    /// Budget, backstop.
    pub options: GoalOptions,
    /// GOAL.yaml, as written and read.
    pub file: PathBuf,
    /// The folder `file` is written and read beneath without following a link (commands can
    /// change what lies between): the workspace, or for a file outside it its own folder
    /// ([`goal_root`]).
    pub root: PathBuf,
    /// GOAL.yaml's path as the model is told it (default: `file`).
    pub shown_file: Option<String>,
    /// The interrupt of the whole goal: checked between rounds (each round's own stream is
    /// interrupted by the runner with it).
    pub cancel: CancellationToken,
    /// Where `goal_finished` is written.
    pub trace: Option<Arc<dyn TraceSink>>,
    /// Kept up to date as the goal runs.
    pub state: SharedGoalState,
}

impl std::fmt::Debug for GoalRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoalRun")
            .field("options", &self.options)
            .field("file", &self.file)
            .finish()
    }
}

/// The text of a goal's input and its objective, or why it is not one.
pub fn objective_of(input: &[OmniMessage]) -> Result<(String, String), GoalError> {
    let mut texts = Vec::new();
    for m in input {
        match m.model() {
            Some(ModelPayload::Text(t)) if t.role == Role::User => texts.push(t.text.as_str()),
            _ => return Err(GoalError::NotText),
        }
    }
    let text = texts.join("\n").trim().to_owned();
    if text.is_empty() {
        return Err(GoalError::EmptyObjective);
    }
    let stripped = strip_leading_marker_blocks(&text).trim();
    let objective = if stripped.is_empty() {
        text.clone()
    } else {
        stripped.to_owned()
    };
    Ok((text, objective))
}

/// Runs a goal: writes GOAL.yaml, then streams each round's input and the round (each started
/// with `runner`), and ends with `goal_finished`.
pub fn run_goal(
    run: GoalRun,
    mut runner: RoundRunner,
) -> Result<BoxStream<'static, Frame>, GoalError> {
    let (text, objective) = objective_of(&run.input)?;
    file::write(&run.root, &run.file, &objective).map_err(|source| GoalError::File {
        path: run.file.clone(),
        source,
    })?;
    let shown = run
        .shown_file
        .clone()
        .unwrap_or_else(|| run.file.display().to_string());
    let budget = run.options.budget.filter(|&b| b > 0);
    *lock(&run.state) = Some(GoalState::new(&objective, budget));
    let mut lp = Loop {
        text,
        objective,
        shown,
        file: run.file,
        root: run.root,
        budget,
        max_rounds: run.options.max_rounds.unwrap_or(GOAL_MAX_ROUNDS),
        cancel: run.cancel,
        trace: run.trace,
        state: run.state,
        used: 0,
        rounds: 0,
        aborted: false,
        failed: false,
        phase: Phase::Top,
        current: None,
        pending: VecDeque::new(),
    };
    // Round 1 starts now, so a busy session is said at once.
    lp.step(&mut runner)?;
    Ok(
        stream::unfold((lp, runner), |(mut lp, mut runner)| async move {
            let frame = lp.next(&mut runner).await?;
            Some((frame, (lp, runner)))
        })
        .boxed(),
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Before a regular round.
    Top,
    /// A regular round is running.
    Regular,
    /// The wrap-up round is running.
    WrapUp,
    /// `goal_finished` is queued.
    Done,
}

struct Loop {
    text: String,
    objective: String,
    shown: String,
    file: PathBuf,
    root: PathBuf,
    budget: Option<u64>,
    max_rounds: u64,
    cancel: CancellationToken,
    trace: Option<Arc<dyn TraceSink>>,
    state: SharedGoalState,
    used: u64,
    rounds: u64,
    /// The running round saw the main session's abort.
    aborted: bool,
    /// The running round's last assistant text was cut (`stop_reason: failed`).
    failed: bool,
    phase: Phase,
    current: Option<BoxStream<'static, Frame>>,
    pending: VecDeque<Frame>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Loop {
    async fn next(&mut self, runner: &mut RoundRunner) -> Option<Frame> {
        loop {
            if let Some(f) = self.pending.pop_front() {
                return Some(f);
            }
            if let Some(current) = self.current.as_mut() {
                match current.next().await {
                    Some(frame) => {
                        self.see(frame.message());
                        return Some(frame);
                    }
                    None => self.current = None,
                }
            }
            if self.phase == Phase::Done {
                return None;
            }
            if self.step(runner).is_err() {
                // The session took another task between rounds: the goal cannot go on.
                let _ = self.finish(GoalOutcomeStatus::Aborted);
            }
        }
    }

    /// Accounts one message of a round.
    fn see(&mut self, msg: &OmniMessage) {
        let delta = token_delta(msg);
        if delta > 0 {
            self.used += delta;
            if let Some(s) = lock(&self.state).as_mut() {
                s.used = self.used;
                s.updated_at = msg.timestamp.to_string();
            }
        }
        if msg.has_origin() {
            return;
        }
        match &msg.body {
            Body::Event(EventPayload::Abort { .. }) => self.aborted = true,
            // The last assistant text decides: the max_turns cut is always the last one.
            Body::Model(ModelPayload::Text(t)) if t.role == Role::Assistant => {
                self.failed = t.stop_reason == Some(StopReason::Failed);
            }
            _ => {}
        }
    }

    /// Decides what follows the round that just ended (or the start), and starts it.
    fn step(&mut self, runner: &mut RoundRunner) -> Result<(), EngineBusy> {
        match self.phase {
            Phase::Top => self.top(runner),
            Phase::Regular => {
                if self.aborted {
                    return self.finish(GoalOutcomeStatus::Aborted);
                }
                match file::read_status(&self.root, &self.file) {
                    FileStatus::Complete => return self.finish(GoalOutcomeStatus::Complete),
                    FileStatus::Blocked => return self.finish(GoalOutcomeStatus::Blocked),
                    FileStatus::Active => {}
                }
                // A cut round is not re-fired: the next one would hit the same cut.
                if self.failed {
                    return self.finish(GoalOutcomeStatus::Aborted);
                }
                if self.budget.is_some_and(|b| self.used >= b) {
                    if self.cancel.is_cancelled() {
                        return self.finish(GoalOutcomeStatus::Aborted);
                    }
                    return self.start_round(true, runner);
                }
                self.phase = Phase::Top;
                self.top(runner)
            }
            Phase::WrapUp => {
                let outcome = if self.aborted {
                    GoalOutcomeStatus::Aborted
                } else if file::read_status(&self.root, &self.file) == FileStatus::Complete {
                    GoalOutcomeStatus::Complete
                } else {
                    GoalOutcomeStatus::BudgetLimited
                };
                self.finish(outcome)
            }
            Phase::Done => Ok(()),
        }
    }

    fn top(&mut self, runner: &mut RoundRunner) -> Result<(), EngineBusy> {
        // An abort between rounds has no abort event on any stream: without this check a
        // phantom round would start.
        if self.cancel.is_cancelled() {
            return self.finish(GoalOutcomeStatus::Aborted);
        }
        if self.max_rounds > 0 && self.rounds >= self.max_rounds {
            return self.finish(GoalOutcomeStatus::Aborted);
        }
        self.start_round(false, runner)
    }

    fn start_round(&mut self, wrap_up: bool, runner: &mut RoundRunner) -> Result<(), EngineBusy> {
        self.rounds += 1;
        self.aborted = false;
        self.failed = false;
        let args = prompt::RoundArgs {
            objective: &self.objective,
            goal_file: &self.shown,
            round: self.rounds,
            tokens_used: self.used,
            budget: self.budget,
            body: if self.rounds == 1 {
                &self.text
            } else {
                &self.objective
            },
        };
        let text = if wrap_up {
            prompt::wrap_up_message(&args)
        } else {
            prompt::round_message(&args)
        };
        let input = build::user_text(text);
        let stream = runner(vec![input.clone()])?;
        self.pending.push_back(Frame::new(input));
        self.current = Some(stream);
        self.phase = if wrap_up {
            Phase::WrapUp
        } else {
            Phase::Regular
        };
        if let Some(s) = lock(&self.state).as_mut() {
            s.rounds = self.rounds;
            s.updated_at = Timestamp::now().to_string();
        }
        Ok(())
    }

    /// Queues `goal_finished` (and writes it to the Trace): the goal is over.
    fn finish(&mut self, outcome: GoalOutcomeStatus) -> Result<(), EngineBusy> {
        let frame = Frame::new(build::goal_finished(outcome, self.rounds, self.used));
        if let Some(trace) = &self.trace {
            trace.record(&frame);
        }
        if let Some(s) = lock(&self.state).as_mut() {
            s.status = outcome.into();
            s.rounds = self.rounds;
            s.used = self.used;
            s.updated_at = frame.message().timestamp.to_string();
        }
        self.pending.push_back(frame);
        self.current = None;
        self.phase = Phase::Done;
        Ok(())
    }
}

impl Drop for Loop {
    /// A goal whose stream is dropped before its end is over: it was interrupted.
    fn drop(&mut self) {
        if self.phase != Phase::Done {
            if let Some(s) = lock(&self.state).as_mut() {
                s.status = GoalStatus::Aborted;
                s.updated_at = Timestamp::now().to_string();
            }
        }
    }
}

/// A message's part of a goal's spend: uncached input + output of one request
/// (`request.total - request.cache_read`), from any session, subagents included.
pub fn token_delta(msg: &OmniMessage) -> u64 {
    match &msg.body {
        Body::Event(EventPayload::TokenUsage { request, .. }) => {
            request.total.saturating_sub(request.cache_read)
        }
        _ => 0,
    }
}

/// The round number when `msg` is a goal round's input (a main-session user text that starts
/// with a `[goal]` block), else `None`.
pub fn round_of(msg: &OmniMessage) -> Option<u64> {
    if msg.has_origin() {
        return None;
    }
    match msg.model() {
        Some(ModelPayload::Text(t)) if t.role == Role::User => {
            parse_goal_message(&t.text).and_then(|g| g.round.parse().ok())
        }
        _ => None,
    }
}

/// The outcome, rounds and tokens of a main-session `goal_finished`, else `None`.
pub fn finished_of(msg: &OmniMessage) -> Option<(GoalOutcomeStatus, u64, u64)> {
    if msg.has_origin() {
        return None;
    }
    match &msg.body {
        Body::Event(EventPayload::GoalFinished {
            outcome,
            rounds,
            tokens_used,
        }) => Some((*outcome, *rounds, *tokens_used)),
        _ => None,
    }
}

/// The state of the last goal in a session's records (a trace, in order): its round 1 input
/// starts it, each round input and `token_usage` after it counts, and a `goal_finished` ends
/// it. A goal whose records stop without `goal_finished` reads as `aborted` unless
/// `running` says its loop is still going.
pub fn latest_goal<'a>(
    records: impl IntoIterator<Item = &'a OmniMessage>,
    running: bool,
) -> Option<GoalState> {
    let mut state: Option<GoalState> = None;
    for m in records {
        if let Some(round) = round_of(m) {
            let Some(ModelPayload::Text(t)) = m.model() else {
                continue;
            };
            if round == 1 {
                let body = parse_goal_message(&t.text).map_or("", |g| g.rest);
                let objective = strip_leading_marker_blocks(body).trim();
                state = Some(GoalState {
                    objective: if objective.is_empty() {
                        body.trim().to_owned()
                    } else {
                        objective.to_owned()
                    },
                    status: GoalStatus::Active,
                    budget: budget_in_block(&t.text),
                    used: 0,
                    rounds: 0,
                    updated_at: m.timestamp.to_string(),
                });
            }
            if let Some(s) = state.as_mut().filter(|s| s.status == GoalStatus::Active) {
                s.rounds = round;
                s.updated_at = m.timestamp.to_string();
            }
            continue;
        }
        let Some(s) = state.as_mut().filter(|s| s.status == GoalStatus::Active) else {
            continue;
        };
        if let Some((outcome, rounds, used)) = finished_of(m) {
            s.status = outcome.into();
            s.rounds = rounds;
            s.used = used;
            s.updated_at = m.timestamp.to_string();
        } else {
            s.used += token_delta(m);
        }
    }
    if let Some(s) = state.as_mut() {
        if s.status == GoalStatus::Active && !running {
            s.status = GoalStatus::Aborted;
        }
    }
    state
}

/// The budget a round's block states (`Budget: U / B tokens used …`), -1 for none.
fn budget_in_block(text: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix("Budget: "))
        .and_then(|l| l.split(" / ").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|b| b.parse().ok())
        .unwrap_or(-1)
}

/// Parses a token budget: a positive number with an optional `k` or `m` suffix (`500k`,
/// `1.5m`, `123456`); `None` when it is not one.
///
/// ```
/// use penguin_agent::goal::parse_budget;
/// assert_eq!(parse_budget("500k"), Some(500_000));
/// assert_eq!(parse_budget("1.5M"), Some(1_500_000));
/// assert_eq!(parse_budget("0"), None);
/// assert_eq!(parse_budget("lots"), None);
/// ```
pub fn parse_budget(text: &str) -> Option<u64> {
    let t = text.trim();
    let (number, scale) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 1_000.0),
        (i, 'm' | 'M') => (&t[..i], 1_000_000.0),
        _ => (t, 1.0),
    };
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (number, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || frac.is_some_and(|f| !digits(f)) {
        return None;
    }
    let value = (number.parse::<f64>().ok()? * scale).round();
    (value >= 1.0 && value < u64::MAX as f64).then_some(value as u64)
}

/// A `/goal[:BUDGET] OBJECTIVE` line: `Ok((budget, objective))`, or the error to show.
///
/// ```
/// use penguin_agent::goal::parse_goal_command;
/// assert_eq!(parse_goal_command("/goal:500k fix the tests"), Ok((Some(500_000), "fix the tests".into())));
/// assert_eq!(parse_goal_command("/goal fix it"), Ok((None, "fix it".into())));
/// assert!(parse_goal_command("/goal").is_err());
/// assert!(parse_goal_command("/goal:lots fix it").is_err());
/// ```
pub fn parse_goal_command(line: &str) -> Result<(Option<u64>, String), String> {
    const USAGE: &str =
        "Usage: /goal[:<budget>] <objective>  (e.g. /goal:500k fix all failing tests)";
    let rest = line
        .trim()
        .strip_prefix("/goal")
        .ok_or_else(|| USAGE.to_owned())?;
    let (budget, objective) = match rest.strip_prefix(':') {
        Some(r) => {
            let end = r.find(char::is_whitespace).unwrap_or(r.len());
            let token = &r[..end];
            if token.is_empty() {
                return Err(USAGE.into());
            }
            (Some(token), &r[end..])
        }
        None => (None, rest),
    };
    if !(objective.is_empty() || objective.starts_with(char::is_whitespace)) {
        return Err(USAGE.into());
    }
    let objective = objective.trim();
    if objective.is_empty() {
        return Err(USAGE.into());
    }
    let budget = match budget {
        None => None,
        Some(b) => Some(parse_budget(b).ok_or_else(|| budget_error(b))?),
    };
    Ok((budget, objective.to_owned()))
}

/// The message for a budget that does not parse.
pub fn budget_error(value: &str) -> String {
    format!(
        "Invalid token budget \"{value}\". Use a positive number with an optional k/m suffix (500k, 2m)."
    )
}

/// The line a terminal shows when a goal ends: `[goal] completed · 2 rounds · tokens 1.2k`.
pub fn finished_line(outcome: GoalOutcomeStatus, rounds: u64, tokens: &str) -> String {
    let label = match outcome {
        GoalOutcomeStatus::Complete => "completed",
        GoalOutcomeStatus::Blocked => "blocked (see the final reply for what it needs)",
        GoalOutcomeStatus::BudgetLimited => "stopped: token budget exhausted",
        GoalOutcomeStatus::Aborted => "interrupted",
    };
    let s = if rounds == 1 { "" } else { "s" };
    format!("[goal] {label} \u{b7} {rounds} round{s} \u{b7} tokens {tokens}")
}

/// A token count in a few characters: `950`, `12.3k`, `1.5m`.
pub fn tokens_text(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3).replace(".0k", "k"),
        _ => format!("{:.1}m", n as f64 / 1e6).replace(".0m", "m"),
    }
}

/// The folder GOAL.yaml at `file` is confined to: `workspace` when it lies there (a command
/// can swap `.penguin` for a link), else the file's own folder, which the user chose.
pub fn goal_root(workspace: &Path, file: &Path) -> PathBuf {
    if file.starts_with(workspace) {
        workspace.to_path_buf()
    } else {
        file.parent()
            .map_or_else(|| workspace.to_path_buf(), Path::to_path_buf)
    }
}

/// GOAL.yaml's place for a session: `<workspace>/.penguin/scratchpad/<session id>/GOAL.yaml`
/// (the reference keeps it in the agent's scratchpad under its data root, which penguin's
/// sandbox hides from the model; see `docs/differences.md`).
pub fn default_goal_file(workspace: &Path, session_id: &str) -> PathBuf {
    workspace
        .join(".penguin")
        .join("scratchpad")
        .join(session_id)
        .join(GOAL_FILE_NAME)
}

#[cfg(test)]
mod tests;
