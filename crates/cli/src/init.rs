//! `penguin init` (a starter `config.toml`) and `penguin completions SHELL`.

use std::process::ExitCode;

use crate::untrusted::outln;
use clap::CommandFactory;

/// Every line commented out but the demo default, so the file parses as written and changes
/// nothing until a model is uncommented.
pub(crate) const STARTER_CONFIG: &str = r#"# penguin configuration. Flags override environment variables (PENGUIN_MODEL, ...), which
# override this file. Keys are never stored here: a model names the variable that holds its key.

# The model used when neither --model nor PENGUIN_MODEL names one ("demo" is built in and
# works offline).
default_model = "demo"

# A local OpenAI-compatible server (llama.cpp, vLLM, Ollama, LM Studio):
# [models.local]
# protocol = "openai-chat"              # openai-chat | openai-responses | anthropic-messages | gemini | ollama | demo
# base_url = "http://127.0.0.1:8080/v1"
# model = "qwen2.5-coder"
# context_window = 32768                # optional: the server's context size (llama.cpp -c);
#                                       # max_tokens is then bounded by what the prompt leaves
# max_output_tokens = 4096              # optional
# reconnect_attempts = 1                # optional: retries of a failed request (default 5,
#                                       # about a minute in all); 0 fails at once
# vision = false                        # a model that takes no images gets no read_image

# A hosted model; the key is read from the named variable (each protocol has a default:
# OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY):
# [models.claude]
# protocol = "anthropic-messages"
# model = "claude-sonnet-4-5"
# api_key_env = "ANTHROPIC_API_KEY"
# thinking_level = "medium"             # none, low, medium, high, xhigh, max
# prompt_cache = true                   # the default; false sends no caching field
# [models.claude.price]                 # dollars per million tokens (well-known ids have
# input = 3.0                           # dated defaults: docs/cost.md)
# cached_input = 0.30
# cache_write = 3.75
# output = 15.0

# Context compaction (these are the defaults):
# [compaction]
# max_context_length = 256000           # capped at the model's window - 2048; 0 disables
# mode = "summarize"                    # or "discard"

# How tasks run: a cap on model requests per task, and how tool calls are approved when no
# flag says (--approve MODE, --yes):
# [session]
# max_turns = 50                        # default -1: no cap
# approval = "read-only"                # read-only (the default) | always-ask (or ask) | deny-all | allow-all

# Commands that are never run, whatever is approved:
# [policy]
# forbidden_commands = ["rm -rf /", "git push --force"]

# How exec_command is confined (namespaces, Landlock, seccomp: docs/security.md):
# [sandbox]
# mode = "workspace-write"              # workspace-write | read-only | off
# network = false                       # true: commands may use the network
# writable = ["~/.cache/pip"]
# inherit_env = ["CARGO_HOME"]          # variables commands get besides PATH, HOME, LANG, ...

# The edit tools offered (default: apply_patch for openai-responses, classic for the others):
# [tools]
# edit = "classic"                      # classic (write_file + edit_file) | apply_patch | both

# The workspace's checkpoints before and after each task, which `penguin rewind` goes back to
# (docs/rewind.md; these are the defaults):
# [checkpoints]
# enabled = true
# include_ignored = false               # true: keep what .gitignore excludes too
# max_file_mb = 16                      # a larger file is left out
# max_new_mb = 256                      # new content one checkpoint stores at most
# store_max_gb = 4                      # past it, the oldest sessions' checkpoints go
"#;

pub(crate) fn init(force: bool) -> Result<ExitCode, String> {
    let root = penguin::trace_store::data_root();
    let path = penguin::config::config_path(&root);
    if path.exists() && !force {
        return Err(format!(
            "{} already exists; pass --force to replace it",
            path.display()
        ));
    }
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    std::fs::write(&path, STARTER_CONFIG).map_err(|e| format!("{}: {e}", path.display()))?;
    outln!("wrote {}", path.display());
    outln!("add a model with `penguin models add`, or uncomment a [models.*] section and set default_model");
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn completions(shell: clap_complete::Shell) {
    let mut cmd = crate::args::Cli::command();
    clap_complete::generate(shell, &mut cmd, "penguin", &mut std::io::stdout());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_starter_config_parses_and_keeps_the_demo() {
        let config = penguin::config::Config::parse(STARTER_CONFIG).unwrap();
        assert_eq!(config.default_model.as_deref(), Some("demo"));
        // Each commented section parses too once uncommented.
        let uncommented: String = STARTER_CONFIG
            .lines()
            .map(|l| {
                l.strip_prefix("# ")
                    .filter(|r| r.starts_with('[') || r.contains(" = "))
                    .unwrap_or(l)
            })
            .collect::<Vec<_>>()
            .join("\n");
        let config = penguin::config::Config::parse(&uncommented).unwrap();
        assert_eq!(config.models.len(), 2);
        assert_eq!(config.sandbox.writable, ["~/.cache/pip"]);
        assert_eq!(config.tools.edit.as_deref(), Some("classic"));
        assert_eq!(config.models["local"].vision, Some(false));
        assert_eq!(config.models["claude"].prompt_cache, Some(true));
        assert!(config.models["claude"].price.is_some());
    }
}
