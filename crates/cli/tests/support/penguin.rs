//! `penguin ARGS` run as a script runs it: in a workspace, with its own home as the data root,
//! no terminal, no model from the environment; and what it said, stdout then stderr.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

pub fn penguin(home: &Path, ws: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .args(args)
        .current_dir(ws)
        .env("PENGUIN_HOME", home)
        .env("PENGUIN_STUB_KEY", "k")
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// stdout, then stderr.
pub fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
