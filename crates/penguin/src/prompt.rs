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

/// The parts of a session's prompt, each a Markdown section with its heading, or empty when
/// there is nothing to say: what the default layout ([`assemble`]) joins, and what a template's
/// placeholders expand to ([`render_template`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sections {
    /// `# Environment`: workspace, OS, shell, date.
    pub environment: String,
    /// `# Tools`: each tool's name and the first line of its description.
    pub tools: String,
    /// `# Skills`: the skills index.
    pub skills: String,
    /// `# Memory`: the memory indexes and their rules.
    pub memory: String,
    /// `# Project instructions`: the `AGENTS.md` files, nearest last.
    pub agents_md: String,
}

/// The sections of a session's prompt in `cx`.
pub fn sections(cx: &PromptContext) -> Sections {
    let mut environment = String::from("# Environment\n");
    environment.push_str(&format!("- Workspace: {}\n", cx.workspace.display()));
    environment.push_str(&format!("- Operating system: {}\n", cx.os));
    if let Some(shell) = &cx.shell {
        environment.push_str(&format!("- Shell: {shell}\n"));
    }
    environment.push_str(&format!("- Date: {}\n", cx.date));
    let mut tools = String::new();
    if !cx.tools.is_empty() {
        tools.push_str("# Tools\n");
        for t in &cx.tools {
            let first = t.description.lines().next().unwrap_or("").trim();
            tools.push_str(&format!("- {}: {first}\n", t.name));
        }
    }
    let skills = cx
        .skills
        .as_ref()
        .map_or_else(String::new, |(dir, skills)| {
            crate::skills::prompt_section(skills, dir, &cx.workspace)
        });
    let memory = cx
        .memory
        .as_ref()
        .map_or_else(String::new, crate::memory::prompt_section);
    let mut agents_md = String::new();
    if !cx.instructions.is_empty() {
        agents_md.push_str(
            "# Project instructions\nFollow these; when two disagree, the later (more specific) one wins.\n",
        );
        for (path, text) in &cx.instructions {
            agents_md.push_str(&format!("\n## {}\n\n{text}\n", path.display()));
        }
    }
    Sections {
        environment,
        tools,
        skills,
        memory,
        agents_md,
    }
}

/// `base` followed by the session's context: workspace, OS, shell, date, tools, skills,
/// memory, then the project instructions (nearest last, so on a conflict the most specific
/// file wins).
pub fn assemble(base: &str, cx: &PromptContext) -> String {
    let s = sections(cx);
    let mut out = base.trim_end().to_owned();
    out.push_str("\n\n");
    out.push_str(&s.environment);
    for part in [&s.tools, &s.skills, &s.memory, &s.agents_md] {
        if !part.is_empty() {
            out.push('\n');
            out.push_str(part);
        }
    }
    out
}

/// The editable system prompt: `<data root>/system-prompt.md`. When it exists (and is not
/// blank), new sessions' prompts are this template with its placeholders expanded
/// ([`render_template`]) instead of the default layout.
pub const TEMPLATE_FILE: &str = "system-prompt.md";

/// The placeholders a template may hold, and what each expands to.
pub const PLACEHOLDERS: &[(&str, &str)] = &[
    (
        "{{BASE_PROMPT}}",
        "penguin's own instructions (what the default layout starts with)",
    ),
    (
        "{{ENVIRONMENT}}",
        "the # Environment section: workspace, OS, shell, date",
    ),
    (
        "{{TOOLS}}",
        "the # Tools section: each tool and the first line of its description",
    ),
    (
        "{{SKILLS}}",
        "the # Skills section: the skills index (empty without skills)",
    ),
    (
        "{{MEMORY}}",
        "the # Memory section: the memory indexes and their rules (empty when memory is off)",
    ),
    (
        "{{AGENTS_MD}}",
        "the # Project instructions section: the AGENTS.md files (empty without any)",
    ),
    ("{{CWD}}", "the workspace path"),
    ("{{PLATFORM}}", "the operating system, e.g. linux (x86_64)"),
    ("{{SHELL}}", "the user's shell ($SHELL; empty when unknown)"),
    ("{{DATE}}", "today, YYYY-MM-DD"),
];

/// `<data root>/system-prompt.md`.
pub fn template_path(data_root: &Path) -> PathBuf {
    data_root.join(TEMPLATE_FILE)
}

/// The template under `data_root`, when there is one with something in it.
pub fn read_template(data_root: &Path) -> Option<String> {
    std::fs::read_to_string(template_path(data_root))
        .ok()
        .filter(|t| !t.trim().is_empty())
}

/// `template` with each of [`PLACEHOLDERS`] replaced by its part of `cx` (`base` for
/// `{{BASE_PROMPT}}`), in one pass: what a placeholder expands to is never scanned again, so a
/// memory note or an AGENTS.md that mentions `{{TOOLS}}` stays as written. Anything else in
/// braces is left as it is.
pub fn render_template(template: &str, base: &str, cx: &PromptContext) -> String {
    let s = sections(cx);
    let workspace = cx.workspace.display().to_string();
    let value = |name: &str| -> Option<&str> {
        Some(match name {
            "BASE_PROMPT" => base.trim_end(),
            "ENVIRONMENT" => s.environment.trim_end(),
            "TOOLS" => s.tools.trim_end(),
            "SKILLS" => s.skills.trim_end(),
            "MEMORY" => s.memory.trim_end(),
            "AGENTS_MD" => s.agents_md.trim_end(),
            "CWD" => &workspace,
            "PLATFORM" => &cx.os,
            "SHELL" => cx.shell.as_deref().unwrap_or(""),
            "DATE" => &cx.date,
            _ => return None,
        })
    };
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        match after
            .find("}}")
            .and_then(|close| Some((close, value(&after[..close])?)))
        {
            Some((close, v)) => {
                out.push_str(v);
                rest = &after[close + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The prompt of a new session on `workspace` with `tools`, from `base` and this machine, with
/// the skills and memory of the data root of this process (`PENGUIN_HOME` or
/// `~/.penguin/data`; [`system_prompt_in`] names another).
pub fn system_prompt_for(base: &str, workspace: &Path, tools: Vec<ToolDefinition>) -> String {
    system_prompt_in(base, workspace, tools, &penguin_trace_store::data_root())
}

/// [`system_prompt_for`] with the skills, memory and template ([`TEMPLATE_FILE`]) of the data
/// root `data_root`.
pub fn system_prompt_in(
    base: &str,
    workspace: &Path,
    tools: Vec<ToolDefinition>,
    data_root: &Path,
) -> String {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let cx = PromptContext::discover(workspace, tools, home.as_deref()).with_data_root(data_root);
    match read_template(data_root) {
        Some(template) => render_template(&template, base, &cx),
        None => assemble(base, &cx),
    }
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

    fn context() -> PromptContext {
        PromptContext {
            workspace: "/w".into(),
            os: "linux (x86_64)".into(),
            shell: None,
            date: "2026-01-02".into(),
            tools: vec![tool("read_file", "Reads a file.")],
            instructions: vec![("/w/AGENTS.md".into(), "Mention {{TOOLS}} literally.".into())],
            skills: None,
            memory: None,
        }
    }

    #[test]
    fn a_template_expands_its_placeholders_once_and_leaves_the_rest() {
        let cx = context();
        let p = render_template(
            "{{BASE_PROMPT}}\nIn {{CWD}} on {{PLATFORM}}, {{DATE}}; shell [{{SHELL}}].\n\n{{TOOLS}}\n\n{{SKILLS}}{{MEMORY}}\n{{AGENTS_MD}}\n{{NOT_ONE}} {{ unclosed",
            "Base.\n",
            &cx,
        );
        assert_eq!(
            p,
            "Base.\nIn /w on linux (x86_64), 2026-01-02; shell [].\n\n# Tools\n- read_file: Reads a file.\n\n\n# Project instructions\nFollow these; when two disagree, the later (more specific) one wins.\n\n## /w/AGENTS.md\n\nMention {{TOOLS}} literally.\n{{NOT_ONE}} {{ unclosed"
        );
        // Every documented placeholder expands.
        for (name, _) in PLACEHOLDERS {
            assert_ne!(render_template(name, "b", &cx), *name);
        }
    }

    #[test]
    fn the_template_under_the_data_root_replaces_the_default_layout() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, ws) = (tmp.path().join("data"), tmp.path().join("ws"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        let default = system_prompt_in("Base.", &ws, Vec::new(), &root);
        assert!(default.starts_with("Base.\n\n# Environment\n"), "{default}");
        // A blank file is no template.
        std::fs::write(template_path(&root), "  \n").unwrap();
        assert_eq!(system_prompt_in("Base.", &ws, Vec::new(), &root), default);
        std::fs::write(template_path(&root), "Mine.\n{{ENVIRONMENT}}").unwrap();
        let mine = system_prompt_in("Base.", &ws, Vec::new(), &root);
        assert!(
            mine.starts_with("Mine.\n# Environment\n- Workspace: "),
            "{mine}"
        );
        assert!(!mine.contains("Base."), "{mine}");
    }
}
