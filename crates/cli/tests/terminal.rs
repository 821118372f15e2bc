//! The chat as a person uses it, in a pseudo-terminal (util-linux `script`): line editing,
//! history, Ctrl-C and Ctrl-D at the prompt, slash commands, scoped "always" approvals and
//! the order of a tool line and its approval question, and background work finishing while
//! the prompt waits.
//!
//! Every step waits for the output it reacts to (bounded polling), never for a fixed time.

use std::path::Path;

#[path = "support/stub_model.rs"]
mod stub_model;

#[path = "support/pty.rs"]
mod pty;
use pty::Pty;

fn user_texts(home: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![home.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                for line in std::fs::read_to_string(&p).unwrap().lines() {
                    let v: serde_json::Value = serde_json::from_str(line).unwrap();
                    if v["payload"]["type"] == "text" && v["payload"]["role"] == "user" {
                        out.push(v["payload"]["text"].as_str().unwrap().to_owned());
                    }
                }
            }
        }
    }
    out
}

const READY: &str = "/quit or Ctrl-D to leave";

#[test]
fn the_chat_prompt_edits_lines_keeps_history_and_knows_its_commands() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut chat = Pty::spawn(home.path(), ws.path(), "chat --yes --model demo");
    chat.wait(READY);
    chat.wait_prompt_after(READY, 1);
    // An arrow key moves the cursor: it is not sent to the model as `^[[D`.
    chat.send("helo\x1b[Dl\r");
    chat.wait("✓ done");
    chat.wait_prompt_after("✓ done", 1);
    // Ctrl-C clears the line; nothing is sent.
    chat.send("junk\x03");
    chat.wait_prompt_after("junk", 1);
    chat.send("/frobnicate\r");
    chat.wait("unknown command /frobnicate");
    chat.send("/help\r");
    chat.wait("/approvals");
    // Ctrl-D on the empty line leaves.
    chat.send("\x04");
    let screen = chat.finish();
    assert!(screen.contains("resume with: penguin resume"), "{screen}");
    assert_eq!(
        user_texts(home.path()),
        ["hello"],
        "only the prompt reached the model: {screen}"
    );
    let history = std::fs::read_to_string(home.path().join("history")).unwrap();
    assert!(history.contains("hello"), "{history}");

    // History is saved per user: a new chat recalls the last entry with ↑.
    let mut again = Pty::spawn(home.path(), ws.path(), "chat --yes --model demo");
    again.wait(READY);
    again.wait_prompt_after(READY, 1);
    again.send("\x1b[A\r");
    again.wait("commands:");
    again.send("/quit\r");
    again.finish();
}

#[test]
fn always_allows_one_command_prefix_shown_after_its_tool_line_and_listed_by_approvals() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut chat = Pty::spawn(home.path(), ws.path(), "chat --model demo");
    chat.wait(READY);
    chat.wait_prompt_after(READY, 1);
    chat.send("look\r");
    chat.wait("press y/n/a");
    let text = chat.text();
    let tool_line = text.find("⚙ exec_command").expect("tool line");
    let question = text.find("Allow exec_command").expect("question");
    assert!(
        tool_line < question,
        "the tool line comes before its question: {text}"
    );
    assert!(text.contains("[a]lways (commands starting `ls`)"), "{text}");
    // One key answers, no Enter; a key the question does not offer asks again.
    chat.send("x");
    chat.wait("not an answer: press y/n/a");
    chat.send("a");
    chat.wait("from now on a command starting `ls` is allowed without asking");
    chat.wait("✓ done");
    chat.wait_prompt_after("✓ done", 1);
    chat.send("again\r");
    chat.wait_n("✓ done", 2);
    assert_eq!(
        chat.text().matches("Allow exec_command").count(),
        1,
        "the second `ls -la` was not asked: {}",
        chat.text()
    );
    chat.wait_prompt_after("✓ done", 2);
    chat.send("/approvals\r");
    chat.wait("exec_command with a command starting `ls`");
    chat.send("/approvals clear\r");
    chat.wait("forgot 1");
    chat.send("third\r");
    chat.wait_n("Allow exec_command", 2);
    chat.wait_n("press y/n/a", 2);
    chat.send("n");
    chat.wait("exec_command denied");
    chat.wait_n("✓ done", 3);
    // A denial is one line.
    assert!(
        !chat.text().contains("Tool call denied by user."),
        "{}",
        chat.text()
    );
    chat.wait_prompt_after("✓ done", 3);
    chat.send("\x04");
    chat.finish();
}

#[test]
fn typing_during_a_task_stays_out_of_the_output_and_undelivered_steering_is_offered_back() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/scenarios/interrupt-mid-stream.json");
    let args = format!("chat --provider scripted --scenario {}", scenario.display());
    let mut chat = Pty::spawn(home.path(), ws.path(), &args);
    chat.wait(READY);
    chat.wait_prompt_after(READY, 1);
    chat.send("explain\r");
    chat.wait("I will sta");
    chat.send("walrus please\r");
    chat.wait("(steering queued: \"walrus please\"");
    chat.send("/abort\r");
    chat.wait("not delivered to the model");
    // Offered as the next prompt: Enter sends it.
    chat.wait_prompt_after("not delivered to the model", 1);
    let text = chat.text();
    assert!(!text.contains("[user_steering]"), "{text}");
    let model_line = text
        .lines()
        .find(|l| l.contains("I will sta"))
        .unwrap()
        .to_owned();
    assert!(
        !model_line.contains("walrus"),
        "typed text never lands inside the model's output: {model_line:?}"
    );
    chat.send("\x15/quit\r");
    chat.finish();
}

#[test]
fn background_work_that_finishes_at_an_idle_prompt_starts_a_task_and_keeps_the_typed_line() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // The command finishes when the test says so (a file appears), not after a guessed time.
    let args = serde_json::json!({
        "cmd": "while [ ! -e go ]; do sleep 0.05; done; echo built",
        "run_in_background": true
    })
    .to_string();
    let url = stub_model::serve(move |body| {
        if body.contains("[background_task_done]") {
            stub_model::text("The build finished.")
        } else if stub_model::has_tool_output(body) {
            stub_model::text("Started it.")
        } else {
            stub_model::tool_call("exec_command", &args)
        }
    });
    std::fs::write(
        home.path().join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"PENGUIN_STUB_KEY\"\n"),
    )
    .unwrap();
    let mut chat = Pty::spawn(home.path(), ws.path(), "chat --yes");
    chat.wait(READY);
    chat.wait_prompt_after(READY, 1);
    chat.send("start the build\r");
    chat.wait("Started it.");
    chat.wait_prompt_after("Started it.", 1);
    // Half a line typed and not sent when the work finishes: kept for the next prompt.
    chat.send("half a tho");
    chat.wait("half a tho");
    std::fs::write(ws.path().join("go"), "").unwrap();
    chat.wait("(background work finished; telling the model)");
    chat.wait("The build finished.");
    chat.wait_prompt_after("The build finished.", 1);
    let text = chat.text();
    let after = &text[text.find("The build finished.").unwrap()..];
    assert!(after.contains("› half a tho"), "{text}");
    chat.send("\x15/quit\r");
    chat.finish();

    let users = user_texts(home.path());
    let notice = users
        .iter()
        .find(|t| t.starts_with("[background_task_done]"))
        .unwrap_or_else(|| panic!("the notice reached the model: {users:?}"));
    assert!(notice.contains("built"), "{notice}");
    assert!(!users.iter().any(|t| t.contains("half a tho")), "{users:?}");
}

#[test]
fn an_at_mention_of_a_workspace_image_attaches_it_to_the_chat_message() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // A 1×1 PNG's first bytes: enough for the image to be known as one.
    std::fs::write(ws.path().join("shot.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    let (url, requests) = stub_model::serve_script(vec![stub_model::text("A red dot.")]);
    std::fs::write(
        home.path().join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"PENGUIN_STUB_KEY\"\n"),
    )
    .unwrap();
    let mut chat = Pty::spawn(home.path(), ws.path(), "chat --yes");
    chat.wait(READY);
    chat.wait_prompt_after(READY, 1);
    chat.send("what is in @shot.png?\r");
    chat.wait("attached: @shot.png (PNG, 16 B)");
    chat.wait("A red dot.");
    chat.wait_prompt_after("A red dot.", 1);
    chat.send("/quit\r");
    chat.finish();

    let request = &requests.all()[0];
    let user = &stub_model::messages(request, "user")[0]["content"];
    assert_eq!(user[0]["text"], "what is in @shot.png?", "{user:#}");
    assert_eq!(
        user[1]["image_url"]["url"], "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==",
        "{user:#}"
    );
}

/// The default approval mode, as a person meets it: the session line says what is asked; a
/// read runs unasked; an edit is asked with the diff it would make, coloured, before anything
/// is written; and the answer writes exactly that.
#[test]
fn by_default_reads_run_unasked_and_an_edit_is_asked_with_its_diff_before_it_is_written() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "one\ntwo\n").unwrap();
    let edit = serde_json::json!({"path": "notes.txt", "old_string": "two", "new_string": "2"});
    let (url, _requests) = stub_model::serve_script(vec![
        stub_model::tool_call("read_file", r#"{"path": "notes.txt"}"#),
        stub_model::tool_call("edit_file", &edit.to_string()),
        stub_model::text("Fixed."),
    ]);
    std::fs::write(
        home.path().join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"PENGUIN_STUB_KEY\"\n"),
    )
    .unwrap();
    let mut chat = Pty::spawn(home.path(), ws.path(), "chat --sandbox off");
    chat.wait(READY);
    assert!(
        chat.text()
            .contains("read-only: asks before edits and commands; reads, searches and plans run"),
        "{}",
        chat.text()
    );
    chat.wait_prompt_after(READY, 1);
    chat.send("fix it\r");
    chat.wait("press y/n/a");
    let text = chat.text();
    assert!(
        !text.contains("Allow read_file"),
        "a read is not asked: {text}"
    );
    let question = text.find("Allow edit_file?").expect("the edit is asked");
    let removed = text.find("-two").expect("the diff is shown");
    assert!(removed < question && text.contains("+2"), "{text}");
    // Coloured: the removed line in red.
    assert!(chat.raw().contains("\x1b[31m-two"), "{text}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "one\ntwo\n",
        "nothing is written before the answer"
    );
    chat.send("y");
    chat.wait("Fixed.");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "one\n2\n"
    );
    chat.wait_prompt_after("Fixed.", 1);
    chat.send("/quit\r");
    chat.finish();
}

/// The chat commands people reach for: `/cost` (this session's tokens and cost), `/model`
/// (the conversation goes on with another configured model; a wrong name changes nothing),
/// `/diff` (the workspace's uncommitted changes), `/new` (a new session, the old one kept).
#[test]
fn cost_model_diff_and_new_do_what_they_say() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let (url, requests) = stub_model::serve_script(vec![
        stub_model::with_usage(stub_model::text("One.")),
        stub_model::with_usage(stub_model::text("Two.")),
    ]);
    let model = |name: &str| {
        format!("[models.{name}]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"{name}-id\"\napi_key_env = \"PENGUIN_STUB_KEY\"\n")
    };
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "default_model = \"stub\"\n{}{}[models.stub.price]\ninput = 3.0\noutput = 15.0\n",
            model("other"),
            model("stub")
        ),
    )
    .unwrap();
    let mut chat = Pty::spawn(home.path(), ws.path(), "chat --yes");
    chat.wait(READY);
    chat.wait_prompt_after(READY, 1);
    chat.send("hi\r");
    chat.wait("One.");
    chat.wait_prompt_after("One.", 1);
    chat.send("/cost\r");
    chat.wait("openai-chat/stub-id");
    assert!(chat.text().contains("$0.0"), "priced: {}", chat.text());
    chat.wait_prompt_after("total ", 1);

    chat.send("/model nope\r");
    chat.wait("no model named \"nope\"");
    chat.wait("still on the model it had");
    chat.wait_prompt_after("still on the model it had", 1);
    chat.send("/model other\r");
    chat.wait("now on other");
    chat.wait_prompt_after("now on other", 1);
    chat.send("again\r");
    chat.wait("Two.");
    chat.wait_prompt_after("Two.", 1);
    let all = requests.all();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1]["model"], "other-id");
    // The same conversation: the second request carries the first exchange.
    let users = stub_model::messages(&all[1], "user");
    assert_eq!(users.len(), 2, "{:#}", all[1]);

    chat.send("/diff\r");
    chat.wait("not a git repository");
    chat.wait_prompt_after("not a git repository", 1);
    std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws.path())
        .status()
        .unwrap();
    std::fs::write(ws.path().join("made.txt"), "x\n").unwrap();
    chat.send("/diff\r");
    chat.wait("new files (untracked): made.txt");
    chat.wait_prompt_after("new files (untracked): made.txt", 1);

    let first = chat.text();
    let id = first
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("session ")?.split(' ').next())
        .unwrap()
        .to_owned();
    chat.send("/new\r");
    chat.wait(&format!("the previous session stays: penguin resume {id}"));
    chat.send("/quit\r");
    chat.finish();
}

/// `/rewind N` in chat: the files as before task N (shown, then asked), and the chat goes on
/// in a fork holding the conversation up to the task before.
#[test]
fn rewind_in_chat_puts_the_files_back_and_goes_on_in_a_fork() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let call = |cmd: &str| {
        stub_model::tool_call(
            "exec_command",
            &serde_json::json!({ "cmd": cmd }).to_string(),
        )
    };
    let (url, requests) = stub_model::serve_script(vec![
        call("echo one > a.txt"),
        stub_model::text("Wrote one."),
        call("echo two > a.txt"),
        stub_model::text("Wrote two."),
        stub_model::text("Back at one."),
    ]);
    std::fs::write(
        home.path().join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"PENGUIN_STUB_KEY\"\n"),
    )
    .unwrap();
    let mut chat = Pty::spawn(home.path(), ws.path(), "chat --yes --sandbox off");
    chat.wait(READY);
    chat.wait_prompt_after(READY, 1);
    chat.send("write one\r");
    chat.wait("Wrote one.");
    chat.wait_prompt_after("Wrote one.", 1);
    chat.send("write two\r");
    chat.wait("Wrote two.");
    chat.wait_prompt_after("Wrote two.", 1);
    chat.send("/rewind 2\r");
    chat.wait("restore a.txt");
    chat.wait("Rewind the files? [y]es / [n]o:");
    chat.send("y\r");
    chat.wait("the conversation as before task 2 is session");
    chat.wait("the previous session stays");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "one\n"
    );
    chat.wait_prompt_after("the previous session stays", 1);
    chat.send("where are we\r");
    chat.wait("Back at one.");
    // The fork's context: task 1, not task 2.
    let last = requests.all().pop().unwrap();
    let users: Vec<String> = stub_model::messages(&last, "user")
        .iter()
        .map(|m| m["content"].to_string())
        .collect();
    assert!(users.iter().any(|u| u.contains("write one")), "{users:?}");
    assert!(!users.iter().any(|u| u.contains("write two")), "{users:?}");
    chat.wait_prompt_after("Back at one.", 1);
    chat.send("/quit\r");
    chat.finish();
}
