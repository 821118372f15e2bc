//! The patch format of codex's models, parsed strictly: every error names the patch line at
//! fault and what was expected there.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: path          then the new file's lines, each starting with `+`
//! *** Delete File: path
//! *** Update File: path
//! *** Move to: new/path       optional, right after Update File
//! @@ optional context line    starts a hunk (the first hunk may omit it); several stack
//!  context line               ' ' context, '-' removed, '+' added; an empty line is
//! -removed line               empty context
//! +added line
//! *** End of File             optional: the hunk's lines end the file
//! *** End Patch
//! ```
//!
//! Marker lines may carry surrounding whitespace, and the whole patch may sit in a shell
//! here-document (`<<'EOF'` … `EOF`), as models trained on the shell form write it.

/// A parsed patch: one change per file, in patch order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Patch {
    pub changes: Vec<Change>,
}

/// What the patch does to one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub path: String,
    /// The patch line of its `***` header.
    pub line: usize,
    pub op: Op,
}

/// Add, delete or update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Add {
        content: String,
    },
    Delete,
    Update {
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

/// One hunk of an update.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hunk {
    /// The patch line where it starts.
    pub line: usize,
    /// `@@ …` lines, each found in order before the hunk's lines.
    pub context: Vec<String>,
    pub lines: Vec<Line>,
    /// `*** End of File` followed: the lines are the file's last.
    pub end_of_file: bool,
}

/// One line of a hunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    Context(String),
    Removed(String),
    Added(String),
}

impl Hunk {
    /// The lines the file must have: context and removed.
    pub(crate) fn old(&self) -> Vec<&str> {
        (self.lines.iter())
            .filter_map(|l| match l {
                Line::Context(t) | Line::Removed(t) => Some(t.as_str()),
                Line::Added(_) => None,
            })
            .collect()
    }
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

/// Parses `text`; an error reads `line N: …`.
pub(crate) fn parse(text: &str) -> Result<Patch, String> {
    let mut lines: Vec<(usize, &str)> = text.lines().enumerate().map(|(i, l)| (i + 1, l)).collect();
    while lines.last().is_some_and(|(_, l)| l.trim().is_empty()) {
        lines.pop();
    }
    let blank_head = lines
        .iter()
        .take_while(|(_, l)| l.trim().is_empty())
        .count();
    lines.drain(..blank_head);
    if let (Some((_, first)), Some((_, last))) = (lines.first(), lines.last()) {
        let opener = first.trim();
        if lines.len() >= 2
            && ["<<EOF", "<<'EOF'", "<<\"EOF\""].contains(&opener)
            && last.trim() == "EOF"
        {
            lines.pop();
            lines.remove(0);
        }
    }
    let Some(&(first_no, first)) = lines.first() else {
        return Err(format!(
            "line 1: the patch is empty; it starts with {BEGIN:?}"
        ));
    };
    if first.trim() != BEGIN {
        return Err(format!(
            "line {first_no}: a patch starts with {BEGIN:?}, not {:?}",
            first.trim()
        ));
    }
    let &(last_no, last) = lines.last().unwrap_or(&(first_no, first));
    if lines.len() < 2 || last.trim() != END {
        return Err(format!(
            "line {last_no}: a patch ends with {END:?}; its last line is {:?}",
            last.trim()
        ));
    }
    let mut body = Body {
        lines: &lines[1..lines.len() - 1],
        at: 0,
    };
    let mut changes = Vec::new();
    while let Some((no, line)) = body.peek() {
        body.at += 1;
        let header = line.trim();
        if let Some(path) = header.strip_prefix(ADD) {
            let path = path_of(path, no, ADD)?;
            changes.push(Change {
                path,
                line: no,
                op: add(&mut body, no)?,
            });
        } else if let Some(path) = header.strip_prefix(DELETE) {
            let path = path_of(path, no, DELETE)?;
            changes.push(Change {
                path,
                line: no,
                op: Op::Delete,
            });
        } else if let Some(path) = header.strip_prefix(UPDATE) {
            let path = path_of(path, no, UPDATE)?;
            let op = update(&mut body, no, &path)?;
            changes.push(Change { path, line: no, op });
        } else {
            return Err(format!(
                "line {no}: expected a file header ({ADD:?}, {DELETE:?} or {UPDATE:?} followed by a path) or {END:?}, not {header:?}"
            ));
        }
    }
    if changes.is_empty() {
        return Err(format!(
            "line {last_no}: the patch changes no file; put {ADD:?}, {DELETE:?} or {UPDATE:?} sections between {BEGIN:?} and {END:?}"
        ));
    }
    Ok(Patch { changes })
}

/// The lines between the begin and end markers, read front to back.
struct Body<'a> {
    lines: &'a [(usize, &'a str)],
    at: usize,
}

impl<'a> Body<'a> {
    fn peek(&self) -> Option<(usize, &'a str)> {
        self.lines.get(self.at).copied()
    }
}

fn path_of(rest: &str, no: usize, marker: &str) -> Result<String, String> {
    let path = rest.trim();
    if path.is_empty() {
        return Err(format!("line {no}: {marker:?} needs a path after it"));
    }
    Ok(path.to_owned())
}

/// A line that ends a file's section: the next header or the end of the patch.
fn is_header(line: &str) -> bool {
    let line = line.trim();
    [ADD, DELETE, UPDATE].iter().any(|m| line.starts_with(m)) || line == END
}

fn add(body: &mut Body<'_>, header: usize) -> Result<Op, String> {
    let mut content = String::new();
    while let Some((no, line)) = body.peek() {
        if let Some(text) = line.strip_prefix('+') {
            content.push_str(text);
            content.push('\n');
        } else if is_header(line) {
            break;
        } else {
            return Err(format!(
                "line {no}: in the Add File section of line {header}, every line of the new file starts with '+' (an empty line is a lone '+'), not {line:?}"
            ));
        }
        body.at += 1;
    }
    Ok(Op::Add { content })
}

fn update(body: &mut Body<'_>, header: usize, path: &str) -> Result<Op, String> {
    let mut move_to = None;
    if let Some((no, line)) = body.peek() {
        if let Some(to) = line.trim().strip_prefix(MOVE) {
            move_to = Some(path_of(to, no, MOVE)?);
            body.at += 1;
        }
    }
    let mut hunks: Vec<Hunk> = Vec::new();
    let mut open: Option<Hunk> = None;
    while let Some((no, line)) = body.peek() {
        if is_header(line) {
            break;
        }
        body.at += 1;
        if line.trim_end() == "@@" || line.starts_with("@@ ") {
            let started = open.as_ref().is_some_and(|h| !h.lines.is_empty());
            if started {
                hunks.extend(open.take());
            }
            let hunk = open.get_or_insert_with(|| Hunk {
                line: no,
                ..Hunk::default()
            });
            let context = line.trim_end().trim_start_matches("@@").trim_start();
            if !context.is_empty() {
                hunk.context.push(context.to_owned());
            }
            continue;
        }
        let hunk = open.get_or_insert_with(|| Hunk {
            line: no,
            ..Hunk::default()
        });
        if line.trim() == END_OF_FILE {
            if hunk.lines.is_empty() {
                return Err(format!(
                    "line {no}: {END_OF_FILE:?} ends a hunk that has no lines"
                ));
            }
            hunk.end_of_file = true;
            hunks.extend(open.take());
            continue;
        }
        match line.chars().next() {
            None => hunk.lines.push(Line::Context(String::new())),
            Some(' ') => hunk.lines.push(Line::Context(line[1..].to_owned())),
            Some('-') => hunk.lines.push(Line::Removed(line[1..].to_owned())),
            Some('+') => hunk.lines.push(Line::Added(line[1..].to_owned())),
            Some(_) => {
                return Err(format!(
                    "line {no}: in the Update File section for {path}, a line starts with ' ' (context), '-' (removed) or '+' (added), or is an '@@' hunk header; {line:?} is none of these"
                ))
            }
        }
    }
    if let Some(hunk) = open {
        if hunk.lines.is_empty() {
            return Err(format!(
                "line {}: the hunk has an '@@' header but no lines",
                hunk.line
            ));
        }
        hunks.push(hunk);
    }
    if hunks.is_empty() && move_to.is_none() {
        return Err(format!(
            "line {header}: Update File {path} has no hunks; give its changes as '@@' hunks of ' ', '-' and '+' lines"
        ));
    }
    Ok(Op::Update { move_to, hunks })
}

#[cfg(test)]
mod tests;
