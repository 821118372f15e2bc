//! Usage and cost (issue 38) end to end, through `penguin` and the stub model: the cost on
//! the end-of-task line, `penguin usage` added up from the traces, and `--max-cost`.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

#[path = "support/stub_model.rs"]
mod stub_model;

use stub_model::with_usage;

struct Home {
    _base: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

/// A data root whose `config.toml` names the stub at `url` (plus `extra`), and a workspace.
fn home(url: &str, extra: &str) -> Home {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws) = (root.join("home"), root.join("ws"));
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"STUB_KEY\"\n{extra}"
        ),
    )
    .unwrap();
    Home {
        _base: base,
        home,
        ws,
    }
}

fn penguin(h: &Home, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &h.home)
        .env("STUB_KEY", "k")
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .env("NO_COLOR", "1")
        .current_dir(&h.ws)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `reply` reporting 1,000 prompt tokens (200 of them cached) and 100 out.
const PRICE: &str =
    "[models.stub.price]\ninput = 3.0\ncached_input = 0.30\ncache_write = 3.75\noutput = 15.0\n";

#[test]
fn the_end_of_task_line_and_penguin_usage_show_the_cost_from_the_traces() {
    let (url, _) = stub_model::serve_script(vec![
        with_usage(stub_model::text("one")),
        with_usage(stub_model::text("two")),
    ]);
    let h = home(&url, PRICE);
    // 200 cached × 0.30 + 800 uncached × 3.75 + 100 out × 15, per million: $0.00456.
    for prompt in ["first", "second"] {
        let out = penguin(&h, &["run", "-y", prompt]);
        let (_, err) = text(&out);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains("1100 tokens (1000 in, 100 out) · $0.0046 ·"),
            "{err}"
        );
    }
    // Added up from the traces, after the processes ended.
    let out = penguin(&h, &["usage", "--by", "model"]);
    let (table, err) = text(&out);
    assert!(out.status.success(), "{err}");
    let row = table
        .lines()
        .find(|l| l.starts_with("openai-chat/stub"))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        ["openai-chat/stub", "2", "2000", "400", "200", "$0.0091"],
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("total")), "{table}");
    let out = penguin(&h, &["usage", "--since", "2999-01-01"]);
    assert!(text(&out)
        .0
        .contains("no model requests recorded since 2999-01-01"));
    let out = penguin(&h, &["usage", "--since", "last week"]);
    assert!(!out.status.success());
    assert!(
        text(&out)
            .1
            .contains("--since: \"last week\" is not a date"),
        "{}",
        text(&out).1
    );
}

#[test]
fn an_unpriced_model_says_so_and_max_cost_is_refused_before_any_request() {
    let (url, requests) = stub_model::serve_script(vec![with_usage(stub_model::text("one"))]);
    let h = home(&url, "");
    let out = penguin(&h, &["run", "-y", "hi"]);
    let (_, err) = text(&out);
    assert!(
        err.contains("· no price for model openai-chat/stub ·"),
        "{err}"
    );
    let before = requests.all().len();
    let out = penguin(&h, &["run", "-y", "--max-cost", "1", "hi"]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("--max-cost needs a price for model openai-chat/stub"),
        "{err}"
    );
    assert_eq!(requests.all().len(), before, "no request was sent");
    // A chat is refused before its first prompt.
    let mut chat = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &h.home)
        .env("STUB_KEY", "k")
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .current_dir(&h.ws)
        .args(["chat", "-y", "--max-cost", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    chat.stdin.take().unwrap().write_all(b"hi\n").unwrap();
    let out = chat.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out)
            .1
            .contains("--max-cost needs a price for model openai-chat/stub"),
        "{}",
        text(&out).1
    );
    assert_eq!(requests.all().len(), before, "no request was sent");
    let out = penguin(&h, &["run", "-y", "--max-cost", "free", "hi"]);
    assert!(
        text(&out).1.contains("\"free\" is not a cost"),
        "{}",
        text(&out).1
    );
}

#[test]
fn max_cost_stops_the_run_when_a_request_reaches_it() {
    let (url, requests) = stub_model::serve_script(vec![
        with_usage(stub_model::tool_call("read_file", r#"{"path": "x.txt"}"#)),
        with_usage(stub_model::text("never asked")),
    ]);
    let h = home(&url, PRICE);
    let out = penguin(&h, &["run", "-y", "--max-cost", "0.001", "read x.txt"]);
    let (_, err) = text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("✗ stopped: cost budget of $0.0010 reached ($0.0046 spent)"),
        "{err}"
    );
    assert_eq!(
        requests.all().len(),
        1,
        "the run stopped after the first request"
    );
}

#[test]
fn a_session_resumed_on_another_model_is_priced_as_that_model_from_there() {
    let (url, _) = stub_model::serve_script(vec![
        with_usage(stub_model::text("one")),
        with_usage(stub_model::text("two")),
        with_usage(stub_model::text("three")),
    ]);
    // The same server under a second name, model id `dear`, at ten times the price.
    let other = format!(
        "[models.dear]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"dear\"\napi_key_env = \"STUB_KEY\"\n[models.dear.price]\ninput = 30.0\ncached_input = 3.0\ncache_write = 37.5\noutput = 150.0\n"
    );
    let h = home(&url, &format!("{PRICE}{other}"));
    let ok = |out: Output| {
        let (_, err) = text(&out);
        assert!(out.status.success(), "{err}");
        err
    };
    ok(penguin(&h, &["run", "-y", "first"]));
    let err = ok(penguin(
        &h,
        &["resume", "--last", "--model", "dear", "second"],
    ));
    assert!(
        err.contains("openai-chat/dear") && err.contains("$0.0456"),
        "{err}"
    );
    // A later resume without --model goes on with the model the session went on with.
    let err = ok(penguin(&h, &["resume", "--last", "third"]));
    assert!(
        err.contains("openai-chat/dear") && err.contains("$0.0456"),
        "{err}"
    );
    let (table, _) = text(&penguin(&h, &["usage", "--by", "model"]));
    let row = |model: &str| {
        table
            .lines()
            .find(|l| l.starts_with(model))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("{model}: {table}"))
    };
    assert_eq!(row("openai-chat/stub")[1], "1", "{table}");
    assert_eq!(row("openai-chat/dear")[1..3], ["2", "2000"], "{table}");
    assert_eq!(row("openai-chat/dear")[5], "$0.0912", "{table}");
    // The trace names the model where it changed, once, and stays a clean trace.
    let traces = h.home.join("default/agents/penguin/traces");
    let day = std::fs::read_dir(&traces).unwrap().next().unwrap().unwrap();
    let file = std::fs::read_dir(day.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let trace = std::fs::read_to_string(file.path()).unwrap();
    let models: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains("\"type\":\"session_meta\""))
        .map(|l| {
            if l.contains("\"model_id\":\"dear\"") {
                "dear"
            } else {
                "stub"
            }
        })
        .collect();
    assert_eq!(models, ["stub", "dear"], "{trace}");
    let check = penguin(&h, &["trace", "check", file.path().to_str().unwrap()]);
    assert!(check.status.success(), "{:?}", text(&check));
}
