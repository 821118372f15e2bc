use super::*;
use penguin_omni_protocol::TokenCounts;

fn round(n: u64, budget: Option<u64>, body: &str) -> OmniMessage {
    build::user_text(prompt::round_message(&prompt::RoundArgs {
        objective: "ship it",
        goal_file: "/x/GOAL.yaml",
        round: n,
        tokens_used: 0,
        budget,
        body,
    }))
}

fn usage(cache_read: u64, uncached_prompt: u64, output: u64) -> OmniMessage {
    let c = TokenCounts::new(cache_read, uncached_prompt, output);
    build::token_usage(c, c)
}

#[test]
fn the_last_goal_is_rebuilt_from_records() {
    let records = [
        build::user_text("hello"),
        round(
            1,
            Some(5000),
            "[use_skills]\nskills: a\n[/use_skills]\n\nship it",
        ),
        usage(100, 40, 10),
        round(2, Some(5000), "ship it"),
        usage(150, 20, 5),
        build::goal_finished(GoalOutcomeStatus::Complete, 2, 75),
    ];
    let g = latest_goal(records.iter(), false).unwrap();
    assert_eq!(
        (g.objective.as_str(), g.status, g.budget, g.used, g.rounds),
        ("ship it", GoalStatus::Complete, 5000, 75, 2)
    );
    // Cut short: running, or aborted when nothing runs it any more.
    let cut = &records[..3];
    let g = latest_goal(cut.iter(), true).unwrap();
    assert_eq!(
        (g.status, g.used, g.rounds, g.budget),
        (GoalStatus::Active, 50, 1, 5000)
    );
    assert_eq!(
        latest_goal(cut.iter(), false).unwrap().status,
        GoalStatus::Aborted
    );
    assert_eq!(latest_goal(records[..1].iter(), false), None);
    let unbudgeted = [round(1, None, "ship it")];
    assert_eq!(latest_goal(unbudgeted.iter(), true).unwrap().budget, -1);
}

#[test]
fn round_inputs_and_ends_are_recognised() {
    assert_eq!(round_of(&round(3, None, "ship it")), Some(3));
    assert_eq!(round_of(&build::user_text("[goal] not a round")), None);
    let mut child = round(1, None, "x");
    child.origin = Some(vec!["session-child".into()]);
    assert_eq!(round_of(&child), None);
    let end = build::goal_finished(GoalOutcomeStatus::BudgetLimited, 3, 9);
    assert_eq!(
        finished_of(&end),
        Some((GoalOutcomeStatus::BudgetLimited, 3, 9))
    );
    assert_eq!(token_delta(&usage(100, 40, 10)), 50);
}

#[test]
fn the_state_serializes_as_the_reference_view() {
    let s = GoalState {
        objective: "x".into(),
        status: GoalStatus::BudgetLimited,
        budget: -1,
        used: 3,
        rounds: 2,
        updated_at: "2026-01-01T00:00:00.000Z".into(),
    };
    assert_eq!(
        serde_json::to_string(&s).unwrap(),
        r#"{"objective":"x","status":"budget_limited","budget":-1,"used":3,"rounds":2,"updatedAt":"2026-01-01T00:00:00.000Z"}"#
    );
}

#[test]
fn objectives_need_user_text() {
    assert!(matches!(objective_of(&[]), Err(GoalError::EmptyObjective)));
    assert!(matches!(
        objective_of(&[build::user_text("  ")]),
        Err(GoalError::EmptyObjective)
    ));
    assert!(matches!(
        objective_of(&[build::assistant_text("x", StopReason::Completed)]),
        Err(GoalError::NotText)
    ));
    let (text, objective) = objective_of(&[build::user_text(
        "[use_skills]\nskills: a\n[/use_skills]\n\ngo",
    )])
    .unwrap();
    assert_eq!(
        (text.as_str(), objective.as_str()),
        ("[use_skills]\nskills: a\n[/use_skills]\n\ngo", "go")
    );
    assert_eq!(tokens_text(950), "950");
    assert_eq!(tokens_text(12_345), "12.3k");
    assert_eq!(tokens_text(2_000_000), "2m");
}
