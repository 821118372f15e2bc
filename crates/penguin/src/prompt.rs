//! The system prompt of a session: penguin's instructions, where and when the session runs,
//! the tools it has, its skills index and its memory indexes, and the project's own
//! instructions from `AGENTS.md` files.
//!
//! Assembled once when a session is created and recorded in its `session_meta`, so a resumed
//! session keeps the prompt it started with.

use std::path::{Path, PathBuf};

use penguin_omni_protocol::ToolDefinition;

use crate::memory::SessionMemory;
use crate::skills::Skill;

/// Where a session runs, as the system prompt states it.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptContext {
    /// The workspace the tools act on.
    pub workspace: PathBuf,
    /// `linux (x86_64)`.
    pub os: String,
    /// The user's shell (`$SHELL`), when known.
    pub shell: Option<String>,
    /// Today, `YYYY-MM-DD`.
    pub date: String,
    /// The tools offered.
    pub tools: Vec<ToolDefinition>,
    /// Instruction files, least specific first: `~/.penguin/AGENTS.md`, then from the
    /// repository root down to the workspace.
    pub instructions: Vec<(PathBuf, String)>,
    /// The skills index (`# Skills`): the user's skills folder and the skills found; no
    /// section when `None`.
    pub skills: Option<(PathBuf, Vec<Skill>)>,
    /// The memory indexes (`# Memory`); no section when `None`.
    pub memory: Option<SessionMemory>,
}

impl PromptContext {
    /// The context of a session on `workspace` with `tools`, read from this machine: its OS,
    /// `$SHELL`, today's date, and the `AGENTS.md` files that apply (`home` is where
    /// `.penguin/AGENTS.md` is looked for).
    pub fn discover(workspace: &Path, tools: Vec<ToolDefinition>, home: Option<&Path>) -> Self {
        let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.into());
        PromptContext {
            os: format!("{} ({})", std::env::consts::OS, std::env::consts::ARCH),
            shell: std::env::var("SHELL").ok().filter(|s| !s.is_empty()),
            date: chrono::Local::now().format("%Y-%m-%d").to_string(),
            tools,
            instructions: instruction_files(&workspace, home),
            workspace,
            skills: None,
            memory: None,
        }
    }

    /// This context with the skills and memory of penguin's data root `data_root`: every
    /// skill found (the user's folder and the workspace's `.agents/skills/`), and the memory
    /// indexes when its memory folders exist (the tools' setup prepares them, as only then
    /// can the model write there).
    pub fn with_data_root(mut self, data_root: &Path) -> Self {
        self.skills = Some((
            crate::skills::user_skills_dir(data_root),
            crate::skills::discover(data_root, &self.workspace),
        ));
        let memory = SessionMemory::read(data_root, &self.workspace);
        self.memory = (memory.user_dir.is_dir() && memory.workspace_dir.is_dir()).then_some(memory);
        self
    }
}

/// The `AGENTS.md` files for `workspace`: `home/.penguin/AGENTS.md`, then each directory from
/// the repository root (the nearest ancestor with a `.git`) down to the workspace. Without a
/// repository only the workspace's own file counts, so a stray file in `/` or `/tmp` never
/// leaks into unrelated sessions. Unreadable or blank files are skipped.
pub fn instruction_files(workspace: &Path, home: Option<&Path>) -> Vec<(PathBuf, String)> {
    let mut dirs: Vec<&Path> = Vec::new();
    let mut at = Some(workspace);
    let mut root_found = false;
    while let Some(dir) = at {
        dirs.push(dir);
        if dir.join(".git").exists() {
            root_found = true;
            break;
        }
        at = dir.parent();
    }
    if !root_found {
        dirs.truncate(1);
    }
    dirs.reverse();
    let global = home.map(|h| h.join(".penguin").join("AGENTS.md"));
    global
        .into_iter()
        .chain(dirs.into_iter().map(|d| d.join("AGENTS.md")))
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            (!text.trim().is_empty()).then(|| (path, text.trim_end().to_owned()))
        })
        .collect()
}

/// `base` followed by the session's context: workspace, OS, shell, date, tools, then the
/// project instructions (nearest last, so on a conflict the most specific file wins).
pub fn assemble(base: &str, cx: &PromptContext) -> String {
    let mut out = base.trim_end().to_owned();
    out.push_str("\n\n# Environment\n");
    out.push_str(&format!("- Workspace: {}\n", cx.workspace.display()));
    out.push_str(&format!("- Operating system: {}\n", cx.os));
    if let Some(shell) = &cx.shell {
        out.push_str(&format!("- Shell: {shell}\n"));
    }
    out.push_str(&format!("- Date: {}\n", cx.date));
    if !cx.tools.is_empty() {
        out.push_str("\n# Tools\n");
        for t in &cx.tools {
            let first = t.description.lines().next().unwrap_or("").trim();
            out.push_str(&format!("- {}: {first}\n", t.name));
        }
    }
    if let Some((dir, skills)) = &cx.skills {
        out.push('\n');
        out.push_str(&crate::skills::prompt_section(skills, dir, &cx.workspace));
    }
    if let Some(memory) = &cx.memory {
        out.push('\n');
        out.push_str(&crate::memory::prompt_section(memory));
    }
    if !cx.instructions.is_empty() {
        out.push_str(
            "\n# Project instructions\nFollow these; when two disagree, the later (more specific) one wins.\n",
        );
        for (path, text) in &cx.instructions {
            out.push_str(&format!("\n## {}\n\n{text}\n", path.display()));
        }
    }
    out
}

/// The prompt of a new session on `workspace` with `tools`, from `base` and this machine, with
/// the skills and memory of the data root of this process (`PENGUIN_HOME` or
/// `~/.penguin/data`; [`system_prompt_in`] names another).
pub fn system_prompt_for(base: &str, workspace: &Path, tools: Vec<ToolDefinition>) -> String {
    system_prompt_in(base, workspace, tools, &penguin_trace_store::data_root())
}

/// [`system_prompt_for`] with the skills and memory of the data root `data_root`.
pub fn system_prompt_in(
    base: &str,
    workspace: &Path,
    tools: Vec<ToolDefinition>,
    data_root: &Path,
) -> String {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    assemble(
        base,
        &PromptContext::discover(workspace, tools, home.as_deref()).with_data_root(data_root),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters: None,
        }
    }

    #[test]
    fn agents_files_run_from_home_then_repo_root_down_to_the_workspace() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let repo = tmp.path().join("repo");
        let ws = repo.join("crates/x");
        std::fs::create_dir_all(home.join(".penguin")).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(home.join(".penguin/AGENTS.md"), "global\n").unwrap();
        std::fs::write(repo.join("AGENTS.md"), "root").unwrap();
        std::fs::write(repo.join("crates/AGENTS.md"), "   \n").unwrap();
        std::fs::write(ws.join("AGENTS.md"), "nearest").unwrap();
        // Above the repository root: not part of this project.
        std::fs::write(tmp.path().join("AGENTS.md"), "outside").unwrap();
        let found: Vec<String> = instruction_files(&ws, Some(&home))
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(found, ["global", "root", "nearest"]);
        // No repository: only the workspace's own file.
        let lone = tmp.path().join("lone");
        std::fs::create_dir_all(&lone).unwrap();
        std::fs::write(lone.join("AGENTS.md"), "lone").unwrap();
        let found = instruction_files(&lone, None);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1, "lone");
    }

    #[test]
    fn the_prompt_names_workspace_os_shell_date_tools_and_instructions() {
        let cx = PromptContext {
            workspace: "/w".into(),
            os: "linux (x86_64)".into(),
            shell: Some("/bin/zsh".into()),
            date: "2026-01-02".into(),
            tools: vec![tool("exec_command", "Runs a command.\nMore detail.")],
            instructions: vec![
                ("/r/AGENTS.md".into(), "Use tabs.".into()),
                ("/r/w/AGENTS.md".into(), "Use spaces.".into()),
            ],
            skills: None,
            memory: None,
        };
        let p = assemble("Base.", &cx);
        assert_eq!(
            p,
            "Base.\n\n# Environment\n- Workspace: /w\n- Operating system: linux (x86_64)\n- Shell: /bin/zsh\n- Date: 2026-01-02\n\n# Tools\n- exec_command: Runs a command.\n\n# Project instructions\nFollow these; when two disagree, the later (more specific) one wins.\n\n## /r/AGENTS.md\n\nUse tabs.\n\n## /r/w/AGENTS.md\n\nUse spaces.\n"
        );
    }

    #[test]
    fn skills_and_memory_come_after_the_tools_and_before_the_project_instructions() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, ws) = (tmp.path().join("data"), tmp.path().join("ws"));
        std::fs::create_dir_all(ws.join(".agents/skills/lint")).unwrap();
        std::fs::write(
            ws.join(".agents/skills/lint/SKILL.md"),
            "---\nname: lint\ndescription: Lint the code\n---\nRun it.",
        )
        .unwrap();
        std::fs::write(ws.join("AGENTS.md"), "Be brief.").unwrap();
        let cx = PromptContext::discover(&ws, vec![tool("read_file", "Reads.")], None)
            .with_data_root(&root);
        // No memory folders yet: no memory section (the tools could not write there).
        assert!(cx.memory.is_none());
        let p = assemble("Base.", &cx);
        let (tools, skills, project) = (
            p.find("# Tools").unwrap(),
            p.find("# Skills").unwrap(),
            p.find("# Project instructions").unwrap(),
        );
        assert!(tools < skills && skills < project, "{p}");
        assert!(
            p.contains("- `lint` — Lint the code (.agents/skills/lint/SKILL.md)"),
            "{p}"
        );
        crate::memory::SessionMemory::prepare(&root, &ws).unwrap();
        let p = assemble(
            "Base.",
            &PromptContext::discover(&ws, Vec::new(), None).with_data_root(&root),
        );
        let (skills, memory, project) = (
            p.find("# Skills").unwrap(),
            p.find("# Memory").unwrap(),
            p.find("# Project instructions").unwrap(),
        );
        assert!(skills < memory && memory < project, "{p}");
    }
}
