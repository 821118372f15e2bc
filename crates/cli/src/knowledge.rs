//! `penguin skills` and `penguin memory`: what sessions know besides the workspace
//! (`docs/skills.md`, `docs/memory.md`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use penguin::memory::{self, MemoryScope, USER_SCOPE};
use penguin::skills::{self, SkillScope};

use crate::args::{MemoryCommand, MemoryScopeArgs, SkillsCommand};
use crate::untrusted::{errln, json_line, out, outln, Untrusted};

fn data_root() -> PathBuf {
    penguin::trace_store::data_root()
}

fn workspace(dir: Option<PathBuf>) -> Result<PathBuf, String> {
    let dir = match dir {
        Some(d) => d,
        None => std::env::current_dir().map_err(|e| format!("current directory: {e}"))?,
    };
    std::fs::canonicalize(&dir).map_err(|e| format!("{}: {e}", dir.display()))
}

/// `penguin skills …`.
pub(crate) fn skills(command: SkillsCommand) -> Result<ExitCode, String> {
    let root = data_root();
    match command {
        SkillsCommand::List {
            workspace: ws,
            json,
        } => {
            let ws = workspace(ws)?;
            let all = skills::discover(&root, &ws);
            if json {
                let text = serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?;
                outln!("{}", json_line(&text));
                return Ok(ExitCode::SUCCESS);
            }
            if all.is_empty() {
                outln!(
                    "no skills (install one with `penguin skills install PATH|GIT-URL`, or add {}/NAME/SKILL.md to the workspace)",
                    skills::WORKSPACE_SKILLS_DIR
                );
            }
            for s in &all {
                let scope = match s.scope {
                    SkillScope::User => "user",
                    SkillScope::Workspace => "workspace",
                };
                let mut line = format!("{}  v{}  {scope}", s.name, s.version);
                if !s.description.is_empty() {
                    line.push_str(&format!("  {}", s.description));
                }
                if s.shadowed {
                    line.push_str("  (shadowed by the workspace's)");
                }
                // A skill's name and description are its author's.
                outln!("{}", Untrusted(&line));
                if let Some(problem) = &s.problem {
                    errln!(
                        "penguin: skill {}: {} ({})",
                        Untrusted(&s.name),
                        Untrusted(problem),
                        s.path.display()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Install { source } => {
            let done = skills::install(&root, &source).map_err(|e| e.to_string())?;
            for s in &done {
                outln!(
                    "installed {} (v{}) in {}",
                    Untrusted(&s.name),
                    s.version,
                    s.path.display()
                );
                if let Some(problem) = &s.problem {
                    errln!(
                        "penguin: skill {}: {}",
                        Untrusted(&s.name),
                        Untrusted(problem)
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Remove { name } => {
            let dir = skills::remove(&root, &name).map_err(|e| e.to_string())?;
            outln!("removed {name} ({})", dir.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The scope key the flags name: `user`, a key, or the workspace's.
fn scope_key(args: &MemoryScopeArgs) -> Result<String, String> {
    if args.user {
        return Ok(USER_SCOPE.to_owned());
    }
    if let Some(key) = &args.scope {
        return Ok(key.clone());
    }
    let ws = workspace(args.workspace.clone())?;
    Ok(memory::workspace_key(&ws))
}

fn scope_title(s: &MemoryScope) -> String {
    match &s.workspace {
        None if s.key == USER_SCOPE => "user memory".to_owned(),
        None => format!("{} (workspace unknown)", s.key),
        Some(ws) => format!("workspace {} ({})", ws.display(), s.key),
    }
}

/// `penguin memory …`.
pub(crate) fn memory(command: MemoryCommand) -> Result<ExitCode, String> {
    let root = data_root();
    match command {
        MemoryCommand::List { json } => {
            let all = memory::scopes(&root);
            if json {
                let text = serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?;
                outln!("{}", json_line(&text));
                return Ok(ExitCode::SUCCESS);
            }
            if all.iter().all(|s| s.notes.is_empty()) {
                outln!("nothing saved yet");
            }
            for s in all.iter().filter(|s| !s.notes.is_empty()) {
                outln!("{}:", Untrusted(&scope_title(s)));
                // Notes are written by the model (`memory_save`).
                for n in &s.notes {
                    let date = n.updated_at.as_deref().unwrap_or("");
                    outln!(
                        "  {}  {}  {}",
                        Untrusted(&n.name),
                        Untrusted(date),
                        Untrusted(&n.description)
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        MemoryCommand::Show { name, scope } => {
            let key = scope_key(&scope)?;
            let text = match name {
                Some(name) => {
                    memory::note(&root, &key, &name)
                        .map_err(|e| e.to_string())?
                        .1
                }
                None => match memory::scope(&root, &key) {
                    Ok(s) => s.index,
                    // The current workspace's (or the user's) scope before anything was saved.
                    Err(_) if scope.scope.is_none() => String::new(),
                    Err(e) => return Err(e.to_string()),
                },
            };
            if text.trim().is_empty() {
                errln!(
                    "nothing saved in this memory yet: the agent writes notes here when asked to remember something (`penguin memory edit` writes one yourself)"
                );
                return Ok(ExitCode::SUCCESS);
            }
            out!("{}", Untrusted(&text));
            if !text.ends_with('\n') && !text.is_empty() {
                outln!();
            }
            Ok(ExitCode::SUCCESS)
        }
        MemoryCommand::Edit { name, scope } => {
            let key = scope_key(&scope)?;
            let dir = match memory::scope(&root, &key) {
                Ok(s) => s.dir,
                // The current workspace's (or the user's) scope before anything was saved.
                Err(_) if scope.scope.is_none() => {
                    let ws = workspace(scope.workspace.clone())?;
                    let m = memory::SessionMemory::prepare(&root, &ws)
                        .map_err(|e| format!("memory: {e}"))?;
                    if scope.user {
                        m.user_dir
                    } else {
                        m.workspace_dir
                    }
                }
                Err(e) => return Err(e.to_string()),
            };
            let file = match name {
                Some(name) => dir.join(penguin::tools::memory::note_file_name(&name)?),
                None => dir.join(penguin::tools::memory::MEMORY_INDEX),
            };
            edit(&file)
        }
        MemoryCommand::Forget { name, scope } => {
            let key = scope_key(&scope)?;
            let (file, lines) = memory::forget(&root, &key, &name).map_err(|e| e.to_string())?;
            outln!(
                "forgot {} ({lines} index line{} dropped)",
                file.display(),
                if lines == 1 { "" } else { "s" }
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Opens `file` in `$VISUAL`, `$EDITOR`, or `vi`, through the shell (so `code -w` works).
fn edit(file: &Path) -> Result<ExitCode, String> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|e| !e.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_owned());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file)
        .status()
        .map_err(|e| format!("cannot start the editor {editor:?}: {e}"))?;
    if status.success() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(format!("the editor {editor:?} failed ({status})"))
    }
}
