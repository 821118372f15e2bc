//! Building scripts: the JSON a scripted model and scripted tools play
//! (`docs/scenario-format.md`).

use serde_json::{json, Value};

/// A `model_msg` with `payload`.
pub fn model(payload: Value) -> Value {
    json!({"type": "model_msg", "payload": payload})
}

/// An `event_msg` with `payload`.
pub fn event(payload: Value) -> Value {
    json!({"type": "event_msg", "payload": payload})
}

/// One step of a stream: `message` after `delay_ms`.
pub fn step(delay_ms: u64, message: Value) -> Value {
    json!({"delay_ms": delay_ms, "message": message})
}

/// A complete assistant text.
pub fn text(text: &str) -> Value {
    model(json!({"type": "text", "role": "assistant", "text": text, "stop_reason": "completed"}))
}

/// A `partial_text` fragment.
pub fn partial_text(event: &str, text: &str) -> Value {
    model(
        json!({"type": "partial_text", "role": "assistant", "event_type": event, "text": text, "stop_reason": "completed"}),
    )
}

/// A complete tool call.
pub fn tool_call(name: &str, id: &str, arguments: &str) -> Value {
    model(
        json!({"type": "tool_call", "role": "assistant", "name": name, "arguments": arguments, "tool_call_id": id, "stop_reason": "completed"}),
    )
}

/// A complete tool output.
pub fn tool_output(id: &str, output: &str) -> Value {
    model(
        json!({"type": "tool_call_output", "role": "user", "output": output, "tool_call_id": id, "stop_reason": "completed"}),
    )
}

/// A `token_usage` event whose request and session counts are both `output`/`total`.
pub fn usage(output: u64, total: u64) -> Value {
    let c = json!({"cache_read": 0, "cache_write": 0, "output": output, "total": total});
    event(json!({"type": "token_usage", "session": c, "request": c}))
}

/// A model request answering `text` at once.
pub fn text_turn(text: &str) -> Value {
    json!({"stream": [step(0, self::text(text)), step(0, usage(1, 10))]})
}

/// A model request calling `name` at once.
pub fn call_turn(name: &str, id: &str, args: Value) -> Value {
    json!({"stream": [step(0, tool_call(name, id, &args.to_string())), step(0, usage(1, 10))]})
}
