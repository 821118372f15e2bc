//! Reading a failed command's output for what the sandbox probably refused: the paths and
//! ports its permission errors name.

use super::*;

impl Sandbox {
    /// A note for the model when a command failed in a way the sandbox may have caused, from
    /// the failure lines `scan` kept; `None` when nothing points at the sandbox.
    pub(crate) fn denial_note(&self, scan: &DenialScan, workspace: &Path) -> Option<String> {
        if !self.is_active() || scan.hits.is_empty() {
            return None;
        }
        let roots = self.writable_roots(workspace);
        let git = self.read_only_git(&roots);
        let mut paths: Vec<String> = Vec::new();
        let mut git_paths: Vec<String> = Vec::new();
        let mut ports: Vec<u16> = Vec::new();
        let mut unlocated = false;
        for line in &scan.hits {
            if self.network && !MARKERS.iter().any(|m| line.contains(m)) {
                // A failed connection with the network allowed is not the sandbox's doing.
                continue;
            }
            let mut located = false;
            if self.mode != SandboxMode::Off {
                for candidate in path_candidates(line) {
                    located = true;
                    let real = real_location(workspace, &candidate);
                    if git.iter().any(|g| real.starts_with(g)) {
                        let shown = format!("'{candidate}'");
                        if !git_paths.contains(&shown) {
                            git_paths.push(shown);
                        }
                        continue;
                    }
                    if roots.iter().any(|r| real.starts_with(r)) {
                        continue;
                    }
                    let shown = if real == lexical_join(workspace, &candidate) {
                        format!("'{candidate}'")
                    } else {
                        format!("'{candidate}' (really {})", real.display())
                    };
                    if !paths.contains(&shown) {
                        paths.push(shown);
                    }
                }
            }
            if !self.network {
                for port in port_candidates(line) {
                    located = true;
                    if !self.allow_ports.contains(&port) && !ports.contains(&port) {
                        ports.push(port);
                    }
                }
            }
            unlocated |= !located;
        }
        let mut suspects = Vec::new();
        if !paths.is_empty() {
            suspects.push(format!(
                "{} (outside the paths it may write)",
                paths.join(", ")
            ));
        }
        if !git_paths.is_empty() {
            suspects.push(format!(
                "{} (a repository's .git, read-only to commands so that nothing they plant in its config or hooks runs with the user's git; `[sandbox] git_writable = true` lets commands commit)",
                git_paths.join(", ")
            ));
        }
        if !ports.is_empty() {
            suspects.push(format!("TCP port {}", ports_text(&ports)));
        }
        if suspects.is_empty() && !unlocated {
            // Every failure named a place the sandbox allows: not the sandbox's doing.
            return None;
        }
        let policy = self.policy_text(workspace);
        Some(if suspects.is_empty() {
            format!(
                "[sandbox: the command reported a permission error while running under the sandbox ({policy}). penguin cannot tell which access failed; if it wrote outside the writable paths{}, the sandbox refused it. Retrying will not help: if the command needs that access, ask the user.]",
                if self.network { "" } else { " or opened a TCP connection" }
            )
        } else {
            format!(
                "[sandbox: the command reported a permission error while running under the sandbox ({policy}); probably refused by the sandbox: {}. This is penguin's reading of the output, not a kernel report. Retrying will not help: if the command needs that access, ask the user.]",
                suspects.join("; ")
            )
        })
    }

    fn policy_text(&self, workspace: &Path) -> String {
        let fs = match self.mode {
            SandboxMode::Off => "filesystem unrestricted".to_owned(),
            mode => {
                let roots: Vec<String> = self
                    .writable_roots(workspace)
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect();
                format!("mode {mode}: writes only beneath {}", roots.join(", "))
            }
        };
        if self.network {
            fs
        } else if self.allow_ports.is_empty() {
            format!("{fs}; network off: TCP connect and bind refused")
        } else {
            format!(
                "{fs}; network off: TCP connect and bind refused except ports {}",
                ports_text(&self.allow_ports)
            )
        }
    }
}

pub(super) fn ports_text(ports: &[u16]) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Texts that commands print for EACCES, EPERM and EXDEV (what Landlock answers).
pub(super) const MARKERS: [&str; 12] = [
    "Permission denied",
    "Operation not permitted",
    "Invalid cross-device link",
    // A write outside the writable roots inside the namespaces.
    "Read-only file system",
    "[Errno 13]",
    "[Errno 1]",
    "[Errno 18]",
    "[Errno 30]",
    "EACCES",
    "EPERM",
    "EXDEV",
    "EROFS",
];

/// Texts of a failed TCP connection: with the network off, a connection to a port that is not
/// allowed never leaves the machine, so these point at the sandbox too (curl, for one, prints
/// its own text rather than the errno's).
pub(super) const NET_MARKERS: [&str; 3] =
    ["Failed to connect", "Couldn't connect", "could not connect"];

/// How many failure lines are kept, and how long a line may get.
pub(super) const MAX_HITS: usize = 8;
pub(super) const MAX_LINE: usize = 4096;

/// Watches a command's output, one stream at a time, for lines reporting a permission error.
#[derive(Clone, Debug, Default)]
pub(crate) struct DenialScan {
    line: String,
    pub(super) hits: Vec<String>,
}

impl DenialScan {
    /// Feeds decoded output.
    pub(crate) fn push(&mut self, text: &str) {
        let mut rest = text;
        while let Some(i) = rest.find('\n') {
            self.append(&rest[..i]);
            self.end_line();
            rest = &rest[i + 1..];
        }
        self.append(rest);
    }

    /// The end of the stream.
    pub(crate) fn finish(&mut self) {
        self.end_line();
    }

    /// Lines of another stream's scan, kept after this one's.
    pub(crate) fn merge(&mut self, other: DenialScan) {
        for hit in other.hits {
            if self.hits.len() < MAX_HITS {
                self.hits.push(hit);
            }
        }
    }

    fn append(&mut self, text: &str) {
        let room = MAX_LINE.saturating_sub(self.line.len());
        if room == 0 {
            return;
        }
        let mut cut = text.len().min(room);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.line.push_str(&text[..cut]);
    }

    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let marked = MARKERS.iter().chain(&NET_MARKERS).any(|m| line.contains(m));
        if self.hits.len() < MAX_HITS && marked {
            self.hits.push(line);
        }
    }
}

/// Paths a failure line names: quoted text that looks like a path, and words starting with
/// `/`. Quoted text is what coreutils, shells and Python print (`'x'`, `"x"`, `‘x’`).
pub(super) fn path_candidates(line: &str) -> Vec<String> {
    const EDGES: [char; 12] = ['\'', '"', '‘', '’', '`', '(', ')', '[', ']', ':', ',', ';'];
    let mut out: Vec<String> = Vec::new();
    let mut push = |p: &str, sure: bool| {
        let p = p.trim_matches(EDGES);
        let looks_like_path = sure
            || p.contains('/')
            || (!p.contains(' ') && p.contains('.') && !p.starts_with('.') && !p.ends_with('.'));
        if !p.is_empty() && looks_like_path && !p.contains("://") && !out.iter().any(|o| o == p) {
            out.push(p.to_owned());
        }
    };
    for (open, close) in [('\'', '\''), ('"', '"'), ('‘', '’'), ('`', '\'')] {
        let mut rest = line;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len_utf8()..];
            let Some(end) = after.find(close) else { break };
            push(&after[..end], false);
            rest = &after[end + close.len_utf8()..];
        }
    }
    for word in line.split_whitespace() {
        let word = word.trim_matches(EDGES);
        if word.starts_with('/') {
            push(word, false);
        }
    }
    // `sh: 1: cannot create out.txt: Permission denied` names a bare relative path.
    if let Some((_, rest)) = line.split_once("cannot create ") {
        if let Some((path, _)) = rest.split_once(": ") {
            if !path.contains(' ') {
                push(path, true);
            }
        }
    }
    out
}

/// Where `path` (relative to `workspace`) really is: symlinks resolved as far as the path
/// exists, since the kernel checked the link's target, not the link.
pub(super) fn real_location(workspace: &Path, path: &str) -> PathBuf {
    let abs = lexical_join(workspace, path);
    if let Ok(real) = std::fs::canonicalize(&abs) {
        return real;
    }
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|p| p.join(name))
            .unwrap_or(abs),
        _ => abs,
    }
}

/// Ports a failure line names: `port N`, or `host:N`.
pub(super) fn port_candidates(line: &str) -> Vec<u16> {
    let mut out = Vec::new();
    let words: Vec<&str> = line.split_whitespace().collect();
    for (i, word) in words.iter().enumerate() {
        let word = word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != ':' && c != '.');
        if word.eq_ignore_ascii_case("port") {
            if let Some(port) = words
                .get(i + 1)
                .and_then(|n| n.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
            {
                out.push(port);
            }
        } else if let Some((host, port)) = word.rsplit_once(':') {
            let hostlike = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
            if (hostlike && host.contains('.')) || host == "localhost" {
                if let Ok(port) = port.parse::<u16>() {
                    out.push(port);
                }
            }
        }
    }
    out
}

/// `base` joined with `path` and normalized without touching the filesystem.
pub(super) fn lexical_join(base: &Path, path: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for comp in base.join(path).components() {
        match comp {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
