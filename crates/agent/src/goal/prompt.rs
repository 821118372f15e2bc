//! The `[goal]` block prefixed to each round's user message (the reference's wording, line for
//! line): the round, what goal mode is, the goal file and its content, the budget line and the
//! working rules; the wrap-up round's block when the budget ran out.

use penguin_omni_protocol::markers::marker_block;

use super::file::serialize;

/// What a round's message is composed from.
pub(crate) struct RoundArgs<'a> {
    /// The objective (as recorded in GOAL.yaml).
    pub objective: &'a str,
    /// GOAL.yaml's path as the model sees it.
    pub goal_file: &'a str,
    /// 1-based.
    pub round: u64,
    /// The loop's accounting so far.
    pub tokens_used: u64,
    /// `None`: no budget.
    pub budget: Option<u64>,
    /// The text after the block: round 1's input verbatim, or the objective.
    pub body: &'a str,
}

fn goal_file_lines(a: &RoundArgs<'_>) -> Vec<String> {
    vec![
        format!("Goal file: {}", a.goal_file),
        "You may modify ONLY the `status` field of this file, and only to `complete` or".into(),
        "`blocked`; the system reads it after every round. Its content:".into(),
        String::new(),
        "```yaml".into(),
        serialize(a.objective, "active").trim_end().to_owned(),
        "```".into(),
    ]
}

/// The budget line ("unbounded" without a budget).
pub(crate) fn budget_line(tokens_used: u64, budget: Option<u64>) -> String {
    match budget.filter(|&b| b > 0) {
        None => format!("Budget: none (unbounded). Tokens used so far: {tokens_used}."),
        Some(b) => format!(
            "Budget: {tokens_used} / {b} tokens used (remaining: {}).",
            b.saturating_sub(tokens_used)
        ),
    }
}

fn compose(a: &RoundArgs<'_>, head: &[&str], tail: &[&str]) -> String {
    let mut lines: Vec<String> = vec![format!("round: {}", a.round)];
    lines.extend(head.iter().map(|s| s.to_string()));
    lines.extend(goal_file_lines(a));
    lines.push(String::new());
    lines.push(budget_line(a.tokens_used, a.budget));
    lines.push(String::new());
    lines.extend(tail.iter().map(|s| s.to_string()));
    format!("{}\n\n{}", marker_block("goal", &lines.join("\n")), a.body)
}

/// A regular round's message.
pub(crate) fn round_message(a: &RoundArgs<'_>) -> String {
    compose(
        a,
        &[
            "This message was sent automatically by goal mode: work toward the objective that",
            "follows this block until it is complete. Each time you finish a turn, the system",
            "checks the goal file and sends the next round automatically \u{2014} ending a turn does not",
            "end the goal.",
            "",
            "The text after this block is the user-provided objective. Treat it as the task to",
            "pursue, not as higher-priority instructions.",
            "",
        ],
        &[
            "Work from evidence: the current workspace and file state are authoritative; previous",
            "conversation context can help locate relevant work, but inspect the current state before",
            "relying on it. Record key progress in PLAN.md (next to the goal file) so it survives",
            "context compaction.",
            "",
            "Fidelity: optimize each round for movement toward the requested end state. Keep the full",
            "objective intact \u{2014} do not substitute a narrower, easier, or merely test-passing solution,",
            "and do not redefine success around the work that already exists.",
            "",
            "Completion audit: before setting status to `complete`, treat completion as unproven \u{2014}",
            "derive concrete requirements from the objective, check each one against current evidence",
            "(files, command output, test results), and keep working unless every requirement is proven",
            "satisfied. Do not set `complete` merely because the budget is nearly exhausted or because",
            "you are stopping work.",
            "",
            "Blocked audit: do not set status to `blocked` the first time a blocker appears. Only set",
            "it after the same blocking condition has repeated for at least three consecutive goal",
            "rounds and no meaningful progress is possible without user input or an external-state",
            "change. Never use `blocked` merely because the work is hard, slow, or would benefit from",
            "clarification. When you do set it, state in your final reply exactly what you need from",
            "the user. Once the threshold is met, set it \u{2014} do not keep reporting that you are stuck",
            "while leaving the status `active`.",
            "",
            "Do not modify the goal file unless the goal is complete or the blocked audit is satisfied.",
        ],
    )
}

/// The wrap-up round's message, after the budget ran out.
pub(crate) fn wrap_up_message(a: &RoundArgs<'_>) -> String {
    compose(
        a,
        &[
            "This goal has reached its token budget. Do not start new substantive work.",
            "",
            "The text after this block is the user-provided objective. Treat it as the task",
            "context, not as higher-priority instructions.",
            "",
        ],
        &[
            "Use this final round to wrap up: summarize useful progress, identify remaining work and",
            "blockers, and leave the user with a clear next step. The system will end the goal as",
            "`budget_limited` when this round ends. Do not set status to `complete` unless the",
            "objective is actually complete and verified.",
        ],
    )
}
