//! `penguin ARGS` run as a script runs it: in a workspace, with its own home as the data root,
//! no terminal, no model from the environment; and what it said, stdout then stderr.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

pub fn penguin(home: &Path, ws: &Path, args: &[&str]) -> Output {
    command(home, ws, args).output().unwrap()
}

/// [`penguin`]'s command, to spawn with other pipes (a chat fed line by line, a process to
/// kill).
pub fn command(home: &Path, ws: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_penguin"));
    cmd.args(args)
        .current_dir(ws)
        .env("PENGUIN_HOME", home)
        .env("PENGUIN_STUB_KEY", "k")
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .stdin(Stdio::null());
    cmd
}

/// stdout, then stderr.
pub fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A data root's `config.toml` naming the stub model at `url` as the default (the key in
/// `PENGUIN_STUB_KEY`, which [`penguin`] sets), then `extra`.
pub fn stub_config(home: &Path, url: &str, extra: &str) {
    std::fs::write(
        home.join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"PENGUIN_STUB_KEY\"\n{extra}"),
    )
    .unwrap();
}
