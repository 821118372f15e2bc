//! Terminal control sequences in text penguin did not write (the model's reply and reasoning,
//! a tool call's arguments, a command's output, a stored trace) are shown escaped, never
//! obeyed: OSC 52 (clipboard), OSC 0 (title), SGR 8 (hidden text), cursor up and erase line,
//! the 8-bit CSI, BEL and a lone carriage return. `penguin run` against a stub model, piped and
//! `-v`, raw JSON lines, `penguin show`, an approval question, and in a pseudo-terminal where
//! penguin's own colours must still be there.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::json;

#[path = "support/stub_model.rs"]
mod stub_model;

use stub_model::Reply;

/// Everything a hostile text does to a terminal, at once.
const HOSTILE: &str = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x1b[8mhidden\x1b[28m\x1b[1A\x1b[2K\u{9b}31m\rforged: allowed";

/// How [`HOSTILE`] reads once neutralised (its first line: the escapes show where each was).
const SHOWN: &str = r"\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x1b[8mhidden\x1b[28m\x1b[1A\x1b[2K\u{9b}31m\x0dforged: allowed";

/// A shell command printing [`HOSTILE`] (and a second line of it) as raw bytes.
const PRINT_HOSTILE: &str = r"printf '\033]52;c;cm0gLXJmIH4=\007\033]0;pwned\007\033[8mhidden\033[28m\033[1A\033[2K\302\23331m\rforged: allowed\n\033[8mline two\n'";

struct Setup {
    _base: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

/// A data root whose model replies with [`HOSTILE`] reasoning and text and a call of
/// `exec_command` with `cmd`, then (after the call's output) with [`HOSTILE`] text again.
fn setup(cmd: &str) -> Setup {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws) = (root.join("home"), root.join("ws"));
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&ws).unwrap();
    let delta = |d: serde_json::Value| json!({"choices": [{"index": 0, "delta": d, "finish_reason": null}]});
    let arguments = json!({ "cmd": cmd }).to_string();
    let first = Reply::Stream(vec![
        delta(json!({"role": "assistant", "reasoning_content": HOSTILE})),
        delta(json!({"content": format!("{HOSTILE}\n**{HOSTILE}**\n")})),
        delta(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "exec_command", "arguments": arguments}}]}),
        ),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ]);
    let url = stub_model::serve(move |body| match stub_model::has_tool_output(body) {
        true => stub_model::text(&format!("{HOSTILE} done")),
        false => first.clone(),
    });
    std::fs::write(
        home.join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"STUB_KEY\"\n"),
    )
    .unwrap();
    Setup {
        _base: base,
        home,
        ws,
    }
}

fn penguin(s: &Setup, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &s.home)
        .env("STUB_KEY", "k")
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .env_remove("NO_COLOR")
        .current_dir(&s.ws)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn run_args<'a>(s: &'a Setup, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--sandbox", "off", "--workspace"];
    args.push(s.ws.to_str().unwrap());
    args.extend_from_slice(extra);
    args.push("look");
    args
}

/// No byte a terminal acts on: ESC, BEL, the 8-bit CSI and OSC, a carriage return.
fn assert_inert(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for (c, name) in [
        ('\x1b', "ESC"),
        ('\x07', "BEL"),
        ('\r', "CR"),
        ('\u{9b}', "CSI"),
        ('\u{9d}', "OSC"),
    ] {
        assert!(!text.contains(c), "{name} reached {what}:\n{text}");
    }
}

fn both(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn model_text_arguments_and_command_output_are_shown_escaped_piped_and_verbose() {
    let s = setup(PRINT_HOSTILE);
    for verbose in [false, true] {
        let mut extra = vec!["--yes"];
        if verbose {
            extra.push("-v");
        }
        let out = penguin(&s, &run_args(&s, &extra), "");
        let text = both(&out);
        assert!(out.status.success(), "{text}");
        assert_inert("stdout", &out.stdout);
        assert_inert("stderr", &out.stderr);
        // The reasoning, the reply and its markdown, the last reply: each visibly escaped.
        assert!(
            text.matches(SHOWN).count() >= 4,
            "verbose {verbose}:\n{text}"
        );
        // The command's output: its first line on the tool's status line; all of it with -v.
        assert!(
            text.contains(r"✓ exec_command: \x1b]52;c;cm0gLXJmIH4=\x07"),
            "verbose {verbose}:\n{text}"
        );
        assert_eq!(
            text.contains(r"\x1b[8mline two"),
            verbose,
            "verbose {verbose}:\n{text}"
        );
    }

    // The stored session, rendered and verbose, is shown the same way.
    for args in [
        &["show", "--last"][..],
        &["show", "--last", "-v"],
        &["sessions"],
    ] {
        let out = penguin(&s, args, "");
        assert!(out.status.success(), "{}", both(&out));
        assert_inert(&args.join(" "), &out.stdout);
        assert_inert(&args.join(" "), &out.stderr);
    }
    let shown = both(&penguin(&s, &["show", "--last", "-v"], ""));
    assert!(shown.contains(SHOWN), "{shown}");
    assert!(shown.contains(r"\x1b[8mline two"), "{shown}");
}

#[test]
fn json_lines_keep_the_text_but_carry_no_raw_control_character() {
    let s = setup(PRINT_HOSTILE);
    let out = penguin(&s, &run_args(&s, &["--yes", "--jsonl"]), "");
    assert!(out.status.success(), "{}", both(&out));
    assert_inert("stdout", &out.stdout);
    let stdout = String::from_utf8(out.stdout).unwrap();
    // Every line is still JSON, and the text in it is the model's, byte for byte.
    let texts: Vec<String> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect(l))
        .filter_map(|v| v["payload"]["text"].as_str().map(str::to_owned))
        .collect();
    assert!(
        texts.iter().any(|t| t.contains(HOSTILE)),
        "the model's text is kept whole: {stdout}"
    );
    let jsonl = penguin(&s, &["show", "--last", "--jsonl"], "");
    assert_inert("show --jsonl", &jsonl.stdout);
    for line in String::from_utf8(jsonl.stdout).unwrap().lines() {
        serde_json::from_str::<serde_json::Value>(line).expect(line);
    }
}

#[test]
fn an_approval_question_quotes_the_arguments_escaped() {
    // The command holds a C1 CSI and DEL, which JSON carries raw; the approval shows it.
    let s = setup("printf ok # \u{9b}1A\u{7f}\u{202e}");
    let out = penguin(&s, &run_args(&s, &[]), "y\n");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{}", both(&out));
    assert_inert("stderr", &out.stderr);
    assert!(
        !stderr.contains('\u{7f}') && !stderr.contains('\u{202e}'),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"$ printf ok # \u{9b}1A\x7f\u{202e}"#),
        "{stderr}"
    );
}

/// Every escape sequence in `out`: a CSI from ESC to its final byte, else ESC and the byte
/// after it.
fn escapes(out: &str) -> Vec<&str> {
    out.match_indices('\x1b')
        .map(|(i, _)| {
            let seq = &out[i..];
            let end = match seq.as_bytes().get(1) {
                Some(b'[') => seq[2..]
                    .find(|c: char| ('@'..='~').contains(&c))
                    .map_or(seq.len(), |j| j + 3),
                _ => 2.min(seq.len()),
            };
            &seq[..end]
        })
        .collect()
}

#[test]
fn in_a_terminal_penguins_colours_stay_and_nothing_else_is_obeyed() {
    if Command::new("script").arg("--version").output().is_err() {
        panic!("util-linux `script` is required for the pseudo-terminal test");
    }
    let s = setup(PRINT_HOSTILE);
    for verbose in ["", "-v"] {
        let cmdline = format!(
            "stty cols 200 rows 40; exec {} run --yes {verbose} --sandbox off --workspace {} look",
            env!("CARGO_BIN_EXE_penguin"),
            s.ws.display()
        );
        let mut child = Command::new("script")
            .args(["-qfec", &cmdline, "/dev/null"])
            .env("PENGUIN_HOME", &s.home)
            .env("TERM", "xterm-256color")
            .env("STUB_KEY", "k")
            .env_remove("PENGUIN_MODEL")
            .env_remove("PENGUIN_PROVIDER")
            .env_remove("NO_COLOR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The terminal's input stays open (and empty) until the run is over.
        let stdin = child.stdin.take();
        let out = child.wait_with_output().unwrap();
        drop(stdin);
        let screen = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{screen}");
        // penguin's own: its styles, erasing and redrawing its bottom line, autowrap off
        // while drawing it.
        let own = [
            "\x1b[0m", "\x1b[1m", "\x1b[2m", "\x1b[3m", "\x1b[4m", "\x1b[31m", "\x1b[32m",
            "\x1b[33m", "\x1b[36m", "\x1b[2K", "\x1b[?7l", "\x1b[?7h",
        ];
        for seq in escapes(&screen) {
            assert!(own.contains(&seq), "{seq:?} is not penguin's:\n{screen:?}");
        }
        for raw in ["\x07", "\u{9b}", "\x1b]", "\x1b[8m", "\x1b[1A"] {
            assert!(
                !screen.contains(raw),
                "{raw:?} reached the terminal:\n{screen:?}"
            );
        }
        // A carriage return only as the terminal's newline or to redraw penguin's own line.
        for (i, _) in screen.match_indices('\r') {
            let after = &screen[i + 1..];
            assert!(
                after.starts_with('\n') || after.starts_with("\x1b[2K"),
                "a lone CR at {i}:\n{screen:?}"
            );
        }
        assert!(
            screen.contains("\x1b[1m⚙ exec_command\x1b[0m"),
            "penguin's colours are on: {screen:?}"
        );
        assert!(screen.contains(r"\x1b]52;c;cm0gLXJmIH4=\x07"), "{screen:?}");
        assert!(
            screen.contains(r"\u{9b}31m\x0dforged: allowed"),
            "{screen:?}"
        );
    }
}
