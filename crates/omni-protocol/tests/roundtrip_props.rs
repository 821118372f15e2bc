//! Property tests of the wire format and of the PartialAggregator.

use penguin_omni_protocol::build;
use penguin_omni_protocol::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use serde_json::{Map, Value};

fn any_of<T: Copy + std::fmt::Debug + 'static>(all: &'static [T]) -> impl Strategy<Value = T> {
    proptest::sample::select(all)
}

fn text() -> impl Strategy<Value = String> {
    // Mix plain ASCII with arbitrary unicode (escapes, astral planes, control characters).
    prop_oneof![3 => "[ -~]{0,12}", 1 => any::<String>()]
}

fn id() -> impl Strategy<Value = String> {
    // A few fixed ids make calls, approvals and outputs meet in the validator fuzz below.
    prop_oneof![
        1 => "[a-z_0-9]{1,10}",
        2 => proptest::sample::select(&["call_a", "call_b", "child"][..]).prop_map(str::to_owned),
    ]
}

fn json_leaf() -> impl Strategy<Value = Value> {
    // Floats are left out: not every f64 prints back to the same bits in every toolchain, and
    // no provider data this crate relays relies on them.
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        text().prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec((text(), inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A JSON value that is not `null`: an `Option<Value>` field reads `null` back as absent.
fn json_non_null() -> impl Strategy<Value = Value> {
    json_value().prop_filter("null reads back as None", |v| !v.is_null())
}

fn fidelity() -> impl Strategy<Value = Option<Box<Fidelity>>> {
    option::of(
        vec((text(), json_value()), 0..4)
            .prop_map(|kv| Box::new(kv.into_iter().collect::<Map<_, _>>())),
    )
}

fn stop_reason() -> impl Strategy<Value = StopReason> {
    any_of(StopReason::ALL)
}

fn opt_stop() -> impl Strategy<Value = Option<StopReason>> {
    option::of(stop_reason())
}

fn role() -> impl Strategy<Value = Role> {
    any_of(Role::ALL)
}

fn event_type() -> impl Strategy<Value = StreamEventType> {
    any_of(StreamEventType::ALL)
}

fn images() -> impl Strategy<Value = Option<Vec<String>>> {
    option::of(vec(text(), 0..3))
}

fn inline_data() -> impl Strategy<Value = InlineData> {
    (role(), text(), text(), opt_stop(), fidelity()).prop_map(
        |(role, data, mime_type, stop_reason, fidelity)| InlineData {
            role,
            data,
            mime_type,
            stop_reason,
            fidelity,
        },
    )
}

fn model_payload() -> impl Strategy<Value = ModelPayload> {
    prop_oneof![
        (
            role(),
            text(),
            opt_stop(),
            fidelity(),
            option::of(any_of(TextSender::ALL))
        )
            .prop_map(
                |(role, text, stop_reason, fidelity, sender)| ModelPayload::Text(Text {
                    role,
                    text,
                    stop_reason,
                    fidelity,
                    sender
                })
            ),
        (role(), text(), opt_stop()).prop_map(|(role, image_url, stop_reason)| {
            ModelPayload::ImageUrl(ImageUrl {
                role,
                image_url,
                stop_reason,
            })
        }),
        inline_data().prop_map(ModelPayload::InlineData),
        inline_data().prop_map(ModelPayload::InlineThinking),
        (role(), text(), opt_stop(), fidelity()).prop_map(
            |(role, thinking, stop_reason, fidelity)| {
                ModelPayload::Thinking(Thinking {
                    role,
                    thinking,
                    stop_reason,
                    fidelity,
                })
            }
        ),
        (role(), text(), text(), id(), opt_stop(), fidelity()).prop_map(
            |(role, name, arguments, tool_call_id, stop_reason, fidelity)| {
                ModelPayload::ToolCall(ToolCall {
                    role,
                    name,
                    arguments,
                    tool_call_id,
                    stop_reason,
                    fidelity,
                })
            }
        ),
        (role(), text(), images(), id(), opt_stop()).prop_map(
            |(role, output, images, tool_call_id, stop_reason)| {
                ModelPayload::ToolCallOutput(ToolCallOutput {
                    role,
                    output,
                    images,
                    tool_call_id,
                    stop_reason,
                })
            }
        ),
        (role(), event_type(), text(), opt_stop()).prop_map(
            |(role, event_type, text, stop_reason)| {
                ModelPayload::PartialText(PartialText {
                    role,
                    event_type,
                    text,
                    stop_reason,
                })
            }
        ),
        (role(), event_type(), text(), opt_stop()).prop_map(
            |(role, event_type, thinking, stop_reason)| {
                ModelPayload::PartialThinking(PartialThinking {
                    role,
                    event_type,
                    thinking,
                    stop_reason,
                })
            }
        ),
        (role(), event_type(), text(), text(), id(), opt_stop()).prop_map(
            |(role, event_type, name, arguments, tool_call_id, stop_reason)| {
                ModelPayload::PartialToolCall(PartialToolCall {
                    role,
                    event_type,
                    name,
                    arguments,
                    tool_call_id,
                    stop_reason,
                })
            }
        ),
        (role(), event_type(), text(), images(), id(), opt_stop()).prop_map(
            |(role, event_type, output, images, tool_call_id, stop_reason)| {
                ModelPayload::PartialToolCallOutput(PartialToolCallOutput {
                    role,
                    event_type,
                    output,
                    images,
                    tool_call_id,
                    stop_reason,
                })
            }
        ),
    ]
}

fn counts() -> impl Strategy<Value = TokenCounts> {
    (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(a, b, c, d)| TokenCounts {
        cache_read: a.into(),
        uncached_prompt: b.into(),
        output: c.into(),
        total: d.into(),
    })
}

fn event_payload() -> impl Strategy<Value = EventPayload> {
    let reason = || any_of(CompactionReason::ALL);
    let mode = || any_of(CompactionMode::ALL);
    prop_oneof![
        (
            any_of(ApprovalDecision::ALL),
            id(),
            option::of(text()),
            option::of(text())
        )
            .prop_map(|(decision, tool_call_id, decided_by, reason)| {
                EventPayload::ApprovalDecision {
                    decision,
                    tool_call_id,
                    decided_by,
                    reason,
                    updated_arguments: None,
                }
            }),
        option::of(text()).prop_map(|reason| EventPayload::Abort { reason }),
        Just(EventPayload::RequestBegin),
        (
            stop_reason(),
            option::of(text()),
            option::of(any::<u32>()),
            option::of(any::<u64>())
        )
            .prop_map(|(status, error_message, attempt, retry_in_ms)| {
                EventPayload::RequestEnd {
                    status,
                    error_message,
                    attempt,
                    retry_in_ms,
                }
            }),
        (counts(), counts())
            .prop_map(|(session, request)| EventPayload::TokenUsage { session, request }),
        (reason(), mode(), any::<u64>(), any::<u64>()).prop_map(
            |(reason, mode, context, turns)| {
                EventPayload::CompactionBegin {
                    reason,
                    mode,
                    context,
                    turns,
                }
            }
        ),
        (
            reason(),
            mode(),
            stop_reason(),
            option::of(any::<u32>()),
            option::of(text())
        )
            .prop_map(|(reason, mode, status, attempt, error_message)| {
                EventPayload::CompactionEnd {
                    reason,
                    mode,
                    status,
                    attempt,
                    error_message,
                }
            }),
        (any_of(GoalOutcomeStatus::ALL), any::<u64>(), any::<u64>()).prop_map(
            |(outcome, rounds, tokens_used)| EventPayload::GoalFinished {
                outcome,
                rounds,
                tokens_used,
            }
        ),
        id().prop_map(|session_id| EventPayload::Subagent { session_id }),
        vec((text(), text(), option::of(json_non_null())), 0..3).prop_map(|tools| {
            EventPayload::ToolListReady {
                tools: tools
                    .into_iter()
                    .map(|(name, description, parameters)| ToolDefinition {
                        name,
                        description,
                        parameters,
                    })
                    .collect(),
            }
        }),
        vec(text(), 0..3).prop_map(|servers| EventPayload::McpConnectBegin { servers }),
        (
            any_of(McpConnectStatus::ALL),
            vec(
                (
                    text(),
                    any_of(&["stdio", "http", "sse"]),
                    any_of(McpConnectStatus::ALL),
                    any::<u64>(),
                    option::of(json_non_null()),
                    option::of(text()),
                ),
                0..3
            )
        )
            .prop_map(|(status, results)| EventPayload::McpConnectEnd {
                status,
                results: results
                    .into_iter()
                    .map(|(server, transport, status, duration_ms, tools, error)| {
                        McpConnectResult {
                            server,
                            transport: transport.to_owned(),
                            status,
                            duration_ms,
                            tools,
                            error,
                        }
                    })
                    .collect(),
            }),
    ]
}

fn session_meta() -> impl Strategy<Value = SessionMeta> {
    (
        (text(), text(), text()),
        prop_oneof![
            any::<u64>().prop_map(ContextWindow::Tokens),
            text().prop_map(ContextWindow::Other)
        ],
        (text(), text(), text()),
        option::of(text()),
    )
        .prop_map(
            |(
                (session_id, provider, model_id),
                model_context_window,
                (system_prompt, agent_state, workspace),
                source,
            )| {
                SessionMeta {
                    session_id,
                    provider,
                    model_id,
                    model_context_window,
                    system_prompt,
                    agent_state,
                    workspace,
                    source,
                    forked_from: None,
                }
            },
        )
}

fn message() -> impl Strategy<Value = OmniMessage> {
    (
        // Up to the year 9999: the timestamp format has four year digits.
        0i64..253_402_300_799_999,
        prop_oneof![
            session_meta().prop_map(|m| Body::SessionMeta(Box::new(m))),
            model_payload().prop_map(Body::Model),
            event_payload().prop_map(Body::Event),
        ],
        option::of(vec(id(), 1..4)),
    )
        .prop_map(|(ms, body, origin)| OmniMessage {
            timestamp: Timestamp::from_unix_millis(ms),
            body,
            origin,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_message_round_trips(msg in message()) {
        let json = msg.to_json();
        let back = OmniMessage::from_json(&json).map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
        prop_assert_eq!(&back, &msg);
        prop_assert_eq!(back.to_json(), json.clone());
        // The envelope keys come in the reference's order, origin last.
        prop_assert!(json.starts_with(r#"{"timestamp":""#), "{}", json);
        let type_at = json.find(r#","type":""#).expect("type key");
        let payload_at = json.find(r#","payload":{"#).expect("payload key");
        prop_assert!(type_at < payload_at);
        if msg.origin.is_some() {
            let tail = json.rfind(r#","origin":["#).expect("origin key");
            prop_assert!(json[tail..].ends_with("]}"), "{}", json);
        }
        let frame = Frame::new(msg);
        prop_assert_eq!(frame.json(), json.as_str());
    }
}

/// Splits `content` at char boundaries chosen by `cuts` (sorted, deduplicated positions).
fn split(content: &str, cuts: &[usize]) -> Vec<String> {
    let bounds: Vec<usize> = content
        .char_indices()
        .map(|(i, _)| i)
        .chain([content.len()])
        .collect();
    let mut at: Vec<usize> = cuts.iter().map(|c| bounds[c % bounds.len()]).collect();
    at.sort_unstable();
    at.dedup();
    let mut pieces = Vec::new();
    let mut from = 0;
    for to in at.into_iter().chain([content.len()]) {
        pieces.push(content[from..to].to_owned());
        from = to;
    }
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_split_aggregates_to_the_same_content(
        kind in 0usize..4,
        content in text(),
        cuts in vec(any::<usize>(), 0..6),
        stop in stop_reason(),
        name in "[a-z_]{1,8}",
        tool_call_id in id(),
        image in option::of(text()),
    ) {
        use StreamEventType::*;
        let pieces = split(&content, &cuts);
        prop_assert_eq!(pieces.concat(), content.clone());
        let frag = |event: StreamEventType, s: &str| -> OmniMessage {
            // Only the stop fragment's stop_reason means anything (§1.5).
            let reason = if event == Stop { stop } else { StopReason::Completed };
            match kind {
                0 => build::partial_text(event, s, reason),
                1 => build::partial_thinking(event, s, reason),
                2 => build::partial_tool_call(event, if event == Start { name.as_str() } else { "" }, s, tool_call_id.as_str(), reason),
                _ => {
                    let mut m = build::partial_tool_call_output(event, s, tool_call_id.as_str(), reason);
                    if let (Delta, Some(img), Body::Model(ModelPayload::PartialToolCallOutput(p))) = (event, &image, &mut m.body) {
                        p.images = Some(vec![img.clone()]);
                    }
                    m
                }
            }
        };
        // The first piece rides on the start and the last on the stop half the time, since the
        // aggregator appends every fragment's content.
        let mut stream = Vec::new();
        let (first, rest) = pieces.split_first().expect("split yields at least one piece");
        let carry_on_ends = cuts.len() % 2 == 1 && rest.len() >= 2;
        if carry_on_ends {
            stream.push(frag(Start, first));
            for p in &rest[..rest.len() - 1] {
                stream.push(frag(Delta, p));
            }
            stream.push(frag(Stop, &rest[rest.len() - 1]));
        } else {
            stream.push(frag(Start, ""));
            for p in &pieces {
                stream.push(frag(Delta, p));
            }
            stream.push(frag(Stop, ""));
        }
        let expected_type = stream[0].model().and_then(ModelPayload::complete_type_of_partial);

        let mut agg = PartialAggregator::new();
        let mut done = Vec::new();
        for m in stream.clone() {
            done.extend(agg.push(m));
        }
        prop_assert!(agg.is_idle());
        prop_assert_eq!(done.len(), 1);
        let complete = done.remove(0);
        let payload = complete.model().expect("a model message");
        prop_assert_eq!(Some(payload.type_name()), expected_type);
        prop_assert_eq!(payload.content(), Some(content.as_str()));
        prop_assert_eq!(payload.stop_reason(), Some(stop));
        match payload {
            ModelPayload::ToolCall(tc) => {
                prop_assert_eq!(&tc.name, &name);
                prop_assert_eq!(&tc.tool_call_id, &tool_call_id);
            }
            ModelPayload::ToolCallOutput(out) => {
                prop_assert_eq!(&out.tool_call_id, &tool_call_id);
                // Images ride on delta fragments only here; the aggregator keeps the last set.
                let has_delta = stream.iter().any(|m| {
                    matches!(m.model().and_then(ModelPayload::partial_parts), Some((Delta, _)))
                });
                prop_assert_eq!(out.images.clone(), image.clone().filter(|_| has_delta).map(|i| vec![i]));
            }
            _ => {}
        }

        // aggregate_all over the same fragments, with unrelated messages around, agrees.
        let mut all = vec![build::request_begin()];
        all.extend(stream.clone());
        all.push(build::abort(None));
        let folded = PartialAggregator::aggregate_all(all);
        prop_assert_eq!(folded.len(), 3);
        prop_assert_eq!(folded[0].payload_type(), "request_begin");
        prop_assert_eq!(folded[1].model().and_then(ModelPayload::content), Some(content.as_str()));
        prop_assert_eq!(folded[2].payload_type(), "abort");

        // And the validator accepts the fragments followed by the aggregated complete message.
        let mut checked = stream;
        checked.push(complete);
        let mut validator = validator::StreamValidator::new();
        let found: Vec<_> = checked.iter().flat_map(|m| validator.push(m)).collect();
        let found: Vec<_> = found
            .into_iter()
            .filter(|v| !matches!(v.rule, validator::Rule::PairingUnknownCall | validator::Rule::ApprovalPosition))
            .collect();
        prop_assert!(found.is_empty(), "{:?}", found);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary garbage must produce violations, never a panic, and every violation of a
    /// pushed message carries that message's index.
    #[test]
    fn the_validator_never_panics(messages in vec(message(), 0..40)) {
        let mut v = validator::StreamValidator::new();
        for (i, m) in messages.iter().enumerate() {
            for found in v.push(m) {
                prop_assert_eq!(found.index, Some(i));
                prop_assert!(!found.detail.is_empty());
            }
        }
        prop_assert_eq!(v.messages_seen(), messages.len());
        for found in v.finish() {
            prop_assert_eq!(found.index, None);
        }
    }
}
