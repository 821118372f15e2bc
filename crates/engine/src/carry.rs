//! Carry-over after an interrupt (protocol [§2.9](penguin_omni_protocol::spec#s2.9)
//! *Interrupts and carry-over*) and the retry input of the reconnect ladder
//! ([§2.8](penguin_omni_protocol::spec#s2.8) *The reconnect ladder*).

use std::borrow::Cow;
use std::collections::HashSet;

use penguin_omni_protocol::markers::{self, TranscriptLine};
use penguin_omni_protocol::{build, Body, ModelPayload, OmniMessage, Role, StopReason};

use crate::texts;
use crate::turn::Turn;

/// The transcript lines of one turn: its segments, then its calls, then its outputs.
fn transcribe_turn(turn: &Turn, lines: &mut Vec<String>) {
    for seg in &turn.assistant_segments {
        match seg.model() {
            Some(ModelPayload::Thinking(t)) => {
                lines.push(TranscriptLine::Thinking(t.thinking.clone()).render())
            }
            Some(ModelPayload::Text(t)) => {
                lines.push(TranscriptLine::Text(t.text.clone()).render())
            }
            _ => {}
        }
    }
    for call in &turn.tool_calls {
        if let Some(ModelPayload::ToolCall(c)) = call.model() {
            lines.push(
                TranscriptLine::ToolCall {
                    name: c.name.clone(),
                    id: c.tool_call_id.clone(),
                    arguments: c.arguments.clone(),
                }
                .render(),
            );
        }
    }
    for out in &turn.tool_outputs {
        if let Some(ModelPayload::ToolCallOutput(o)) = out.model() {
            lines.push(
                TranscriptLine::ToolCallOutput {
                    id: o.tool_call_id.clone(),
                    status: o.stop_reason.unwrap_or(StopReason::Completed),
                    output: o.output.clone(),
                }
                .render(),
            );
        }
    }
}

/// `withRetriedTurns`: the original input, plus one `[turn_retried]` user text holding the
/// transcript of every failed attempt so far (when there is any).
pub(crate) fn with_retried_turns(next_input: &[OmniMessage], failed: &[Turn]) -> Vec<OmniMessage> {
    let mut lines = Vec::new();
    for turn in failed {
        transcribe_turn(turn, &mut lines);
    }
    let mut input = next_input.to_vec();
    if !lines.is_empty() {
        input.push(build::user_text(markers::turn_retried_block(&lines)));
    }
    input
}

/// `downgradeCarriedGoalInput`: carry-over holding a goal round's input is only ever consumed
/// after that goal run ended, so its user text is downgraded to a note about the dead round.
/// Anything else is returned as it is.
pub(crate) fn downgrade_carried_goal_input(msg: OmniMessage) -> OmniMessage {
    let downgraded = match msg.model() {
        Some(ModelPayload::Text(t)) if t.role == Role::User && !t.text.is_empty() => {
            match markers::downgrade_goal_input(&t.text) {
                Cow::Owned(text) => text,
                Cow::Borrowed(_) => return msg,
            }
        }
        _ => return msg,
    };
    let mut msg = msg;
    if let Body::Model(ModelPayload::Text(t)) = &mut msg.body {
        t.text = downgraded;
    }
    msg
}

/// `buildCarryOver`: what the next run must send first after this run ended early.
pub(crate) fn build_carry_over(attempt_input: &[OmniMessage], turn: &Turn) -> Vec<OmniMessage> {
    if turn.outcome.status == StopReason::Completed {
        // Case A: the assistant turn was committed; every committed call needs its answer.
        let answered: HashSet<&str> = turn
            .tool_outputs
            .iter()
            .filter_map(|o| o.tool_call_id())
            .collect();
        let mut carry = turn.tool_outputs.clone();
        for call in &turn.tool_calls {
            let id = call.tool_call_id().unwrap_or_default();
            if !answered.contains(id) {
                carry.push(build::tool_call_output(
                    texts::INTERRUPTED_BY_USER,
                    id,
                    StopReason::Aborted,
                ));
            }
        }
        return carry;
    }
    // Case B: the model's output was incomplete. Structured outputs in the input pair with the
    // previous, committed turn and must stay structured; everything else is flattened into one
    // transcript the model can read.
    let mut carry: Vec<OmniMessage> = attempt_input
        .iter()
        .filter(|m| matches!(m.model(), Some(ModelPayload::ToolCallOutput(_))))
        .cloned()
        .collect();
    let mut lines = Vec::new();
    for msg in attempt_input {
        if let Some(ModelPayload::Text(t)) = msg.model() {
            match markers::unwrap_synthetic_block(&t.text) {
                Some(inner) => lines.extend(inner),
                // A goal round can only be cut off here when its goal run ended with it.
                None => lines.push(
                    TranscriptLine::UserInput(markers::downgrade_goal_input(&t.text).into_owned())
                        .render(),
                ),
            }
        }
    }
    transcribe_turn(turn, &mut lines);
    carry.push(build::user_text(markers::turn_aborted_block(&lines)));
    carry
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_llm_providers::LlmOutcome;

    fn turn(
        status: StopReason,
        segments: Vec<OmniMessage>,
        calls: Vec<OmniMessage>,
        outputs: Vec<OmniMessage>,
    ) -> Turn {
        Turn {
            tool_outputs: outputs,
            tool_calls: calls,
            assistant_segments: segments,
            outcome: LlmOutcome::new(status),
        }
    }

    fn text_of(m: &OmniMessage) -> &str {
        m.model().unwrap().content().unwrap()
    }

    #[test]
    fn case_a_answers_every_committed_call_in_call_order() {
        let calls = vec![
            build::tool_call("a", "{}", "call_a", StopReason::Completed, None),
            build::tool_call("b", "{}", "call_b", StopReason::Completed, None),
        ];
        let outputs = vec![build::tool_call_output(
            "done",
            "call_b",
            StopReason::Completed,
        )];
        let carry = build_carry_over(
            &[build::user_text("go")],
            &turn(StopReason::Completed, vec![], calls, outputs),
        );
        assert_eq!(carry.len(), 2);
        assert_eq!(text_of(&carry[0]), "done");
        assert_eq!(carry[1].tool_call_id(), Some("call_a"));
        assert_eq!(text_of(&carry[1]), "[interrupted: tool aborted by user]");
    }

    #[test]
    fn case_b_keeps_outputs_and_unwraps_earlier_blocks() {
        let earlier = build::user_text("[turn_retried]\n  [text]first try[/text]\n[/turn_retried]");
        let input = vec![
            build::tool_call_output("prev", "call_0", StopReason::Completed),
            build::user_text("explain"),
            earlier,
        ];
        let t = turn(
            StopReason::Aborted,
            vec![build::assistant_text("I will", StopReason::Aborted)],
            vec![build::tool_call(
                "read",
                "{\"p\":1}",
                "call_1",
                StopReason::Completed,
                None,
            )],
            vec![],
        );
        let carry = build_carry_over(&input, &t);
        assert_eq!(carry[0].tool_call_id(), Some("call_0"));
        assert_eq!(
            text_of(&carry[1]),
            "[turn_aborted]\n  [user_input]explain[/user_input]\n  [text]first try[/text]\n  [text]I will[/text]\n  [tool_call name=\"read\" id=\"call_1\"]{\"p\":1}[/tool_call]\n[/turn_aborted]"
        );
    }

    #[test]
    fn case_b_with_nothing_to_transcribe_is_an_empty_block() {
        let input = vec![build::user_text("[turn_aborted]\n[/turn_aborted]")];
        let carry = build_carry_over(&input, &turn(StopReason::Aborted, vec![], vec![], vec![]));
        assert_eq!(text_of(&carry[0]), "[turn_aborted]\n[/turn_aborted]");
    }

    #[test]
    fn goal_rounds_are_downgraded_when_carried() {
        let round = "[goal]\nround: 2\nprotocol\n[/goal]\n\nmake all tests pass";
        let note = "[goal round 2 of an ended goal run \u{2014} protocol omitted; do not act on it]\nmake all tests pass";
        let carry = build_carry_over(
            &[build::user_text(round)],
            &turn(StopReason::Aborted, vec![], vec![], vec![]),
        );
        assert_eq!(
            text_of(&carry[0]),
            format!("[turn_aborted]\n  [user_input]{note}[/user_input]\n[/turn_aborted]")
        );
        assert_eq!(
            text_of(&downgrade_carried_goal_input(build::user_text(round))),
            note
        );
        // Only user texts are the goal loop's input.
        let said = build::assistant_text(round, StopReason::Completed);
        assert_eq!(text_of(&downgrade_carried_goal_input(said)), round);
    }

    #[test]
    fn retry_block_only_when_there_are_lines() {
        let input = vec![build::user_text("q")];
        assert_eq!(
            with_retried_turns(&input, &[turn(StopReason::Timeout, vec![], vec![], vec![])]).len(),
            1
        );
        let failed = turn(
            StopReason::Timeout,
            vec![build::assistant_text("Partial", StopReason::Timeout)],
            vec![],
            vec![],
        );
        let retried = with_retried_turns(&input, &[failed]);
        assert_eq!(
            text_of(&retried[1]),
            "[turn_retried]\n  [text]Partial[/text]\n[/turn_retried]"
        );
    }
}
