//! The two YAML jobs of GOAL.yaml: writing a string value as the reference's YAML library
//! (`yaml` 2.x, default options) writes a top-level mapping value, so the file and every round's
//! block read exactly as the reference's; and a tolerant reading of a top-level `status`.

/// `lineWidth` and `minContentWidth` of the reference library's defaults.
const LINE_WIDTH: usize = 80;
const MIN_CONTENT_WIDTH: usize = 20;
/// `doubleQuotedMinMultiLineLength`.
const DOUBLE_QUOTED_MIN_MULTILINE: usize = 40;
/// A top-level mapping's value is written with this indent.
const INDENT: &str = "  ";

/// `key: value\n` for a top-level mapping entry whose value is the string `value`.
pub(crate) fn entry(key: &str, value: &str) -> String {
    // The value starts after `key: `.
    let at_start = key.chars().count() + 2;
    let v = string(value, at_start);
    if v.starts_with('|') || v.starts_with('>') || v.starts_with('\n') {
        format!("{key}: {v}\n").replace(": \n", ":\n")
    } else {
        format!("{key}: {v}\n")
    }
}

fn chars(s: &str) -> Vec<char> {
    s.chars().collect()
}

fn string(value: &str, at_start: usize) -> String {
    let control = value.chars().any(|c| {
        let u = c as u32;
        (u <= 0x08) || (0x0b..=0x1f).contains(&u) || (0x7f..=0x9f).contains(&u)
    });
    if control {
        return double_quoted(value, at_start);
    }
    plain(value, at_start)
}

fn plain(value: &str, at_start: usize) -> String {
    if needs_quotes(value) {
        return if value.contains('\n') {
            block(value, at_start)
        } else {
            quoted(value, at_start)
        };
    }
    if value.contains('\n') {
        // A multi-line string is written as a block where allowed.
        return block(value, at_start);
    }
    // (A document marker matters only at indent 0, never for a mapping's value.)
    if resolves_as_other_type(value) {
        return quoted(value, at_start);
    }
    fold(value, INDENT, Mode::Flow, Some(at_start))
}

/// The reference's `^[\n\t ,[\]{}#&*!|>'"%@`]|^[?-]$|^[?-][ \t]|[\n:][ \t]|[ \t]\n|[\n\t ]#|[\n\t :]$`.
fn needs_quotes(v: &str) -> bool {
    let c = chars(v);
    let Some(&first) = c.first() else {
        return true;
    };
    if "\n\t ,[]{}#&*!|>'\"%@`".contains(first) {
        return true;
    }
    if (first == '?' || first == '-') && (c.len() == 1 || c[1] == ' ' || c[1] == '\t') {
        return true;
    }
    for w in c.windows(2) {
        let (a, b) = (w[0], w[1]);
        if (a == '\n' || a == ':') && (b == ' ' || b == '\t') {
            return true;
        }
        if (a == ' ' || a == '\t') && b == '\n' {
            return true;
        }
        if (a == '\n' || a == '\t' || a == ' ') && b == '#' {
            return true;
        }
    }
    matches!(c.last(), Some('\n' | '\t' | ' ' | ':'))
}

/// Whether a plain scalar would read back as something other than a string (YAML 1.2 core
/// schema: null, booleans, integers, floats).
fn resolves_as_other_type(v: &str) -> bool {
    if matches!(
        v,
        "~" | "null" | "Null" | "NULL" | "true" | "True" | "TRUE" | "false" | "False" | "FALSE"
    ) {
        return true;
    }
    let b = v.as_bytes();
    let digits = |s: &[u8], ok: fn(u8) -> bool| !s.is_empty() && s.iter().all(|&c| ok(c));
    if let Some(rest) = v.strip_prefix("0o") {
        if digits(rest.as_bytes(), |c| (b'0'..=b'7').contains(&c)) {
            return true;
        }
    }
    if let Some(rest) = v.strip_prefix("0x") {
        if digits(rest.as_bytes(), |c| c.is_ascii_hexdigit()) {
            return true;
        }
    }
    let unsigned = match b.first() {
        Some(b'+' | b'-') => &v[1..],
        _ => v,
    };
    if digits(unsigned.as_bytes(), |c| c.is_ascii_digit()) {
        return true;
    }
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") || matches!(v, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    // [-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
    let s = unsigned.as_bytes();
    let mut i = 0;
    let int = s.iter().take_while(|c| c.is_ascii_digit()).count();
    i += int;
    if s.get(i) == Some(&b'.') {
        i += 1;
        let frac = s[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac;
        if int == 0 && frac == 0 {
            return false;
        }
    } else if int == 0 {
        return false;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(s.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let exp = s[j..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp == 0 {
            return false;
        }
        i = j + exp;
    }
    i == s.len()
}

fn quoted(value: &str, at_start: usize) -> String {
    let has_double = value.contains('"');
    let has_single = value.contains('\'');
    if has_double && !has_single {
        single_quoted(value, at_start)
    } else {
        double_quoted(value, at_start)
    }
}

fn single_quoted(value: &str, at_start: usize) -> String {
    let c = chars(value);
    let ws_newline = c.windows(2).any(|w| {
        ((w[0] == ' ' || w[0] == '\t') && w[1] == '\n')
            || (w[0] == '\n' && (w[1] == ' ' || w[1] == '\t'))
    });
    if ws_newline {
        return double_quoted(value, at_start);
    }
    let indent = INDENT;
    let body = newlines_then(&value.replace('\'', "''"), &format!("\n{indent}"));
    fold(&format!("'{body}'"), indent, Mode::Flow, Some(at_start))
}

/// Each run of newlines followed by `then` (`replace(/\n+/g, "$&" + then)`).
fn newlines_then(s: &str, then: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        out.push(c);
        if c == '\n' && it.peek() != Some(&'\n') {
            out.push_str(then);
        }
    }
    out
}

fn json_string(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| format!("\"{value}\""))
}

fn double_quoted(value: &str, at_start: usize) -> String {
    let json = chars(&json_string(value));
    let indent = INDENT;
    let mut out = String::new();
    let mut start = 0usize;
    let mut i = 0usize;
    let at = |k: usize| json.get(k).copied();
    while i < json.len() {
        let mut ch = json[i];
        if ch == ' ' && at(i + 1) == Some('\\') && at(i + 2) == Some('n') {
            out.extend(&json[start..i]);
            out.push_str("\\ ");
            i += 1;
            start = i;
            ch = '\\';
        }
        if ch == '\\' {
            match at(i + 1) {
                Some('u') => {
                    out.extend(&json[start..i]);
                    let code: String = json[i + 2..i + 6].iter().collect();
                    match code.as_str() {
                        "0000" => out.push_str("\\0"),
                        "0007" => out.push_str("\\a"),
                        "000b" => out.push_str("\\v"),
                        "001b" => out.push_str("\\e"),
                        "0085" => out.push_str("\\N"),
                        "00a0" => out.push_str("\\_"),
                        "2028" => out.push_str("\\L"),
                        "2029" => out.push_str("\\P"),
                        c if c.starts_with("00") => {
                            out.push_str("\\x");
                            out.push_str(&c[2..]);
                        }
                        _ => out.extend(&json[i..i + 6]),
                    }
                    i += 5;
                    start = i + 1;
                }
                Some('n') => {
                    if at(i + 2) == Some('"') || json.len() < DOUBLE_QUOTED_MIN_MULTILINE {
                        i += 1;
                    } else {
                        out.extend(&json[start..i]);
                        out.push_str("\n\n");
                        while at(i + 2) == Some('\\')
                            && at(i + 3) == Some('n')
                            && at(i + 4) != Some('"')
                        {
                            out.push('\n');
                            i += 2;
                        }
                        out.push_str(indent);
                        if at(i + 2) == Some(' ') {
                            out.push('\\');
                        }
                        i += 1;
                        start = i + 1;
                    }
                }
                _ => i += 1,
            }
        }
        i += 1;
    }
    let s = if start > 0 {
        out.extend(&json[start.min(json.len())..]);
        out
    } else {
        json.iter().collect()
    };
    fold(&s, indent, Mode::Quoted, Some(at_start))
}

fn line_length_over_limit(s: &[char], indent_len: usize) -> bool {
    let limit = LINE_WIDTH.saturating_sub(indent_len);
    if s.len() <= limit {
        return false;
    }
    let mut start = 0;
    for (i, &c) in s.iter().enumerate() {
        if c == '\n' {
            if i - start > limit {
                return true;
            }
            start = i + 1;
            if s.len() - start <= limit {
                return false;
            }
        }
    }
    true
}

fn block(value: &str, at_start: usize) -> String {
    let v = chars(value);
    // A trailing newline followed by whitespace cannot be kept by a block.
    if let Some(nl) = v.iter().rposition(|&c| c == '\n') {
        if nl + 1 < v.len() && v[nl + 1..].iter().all(|&c| c == ' ' || c == '\t') {
            return quoted(value, at_start);
        }
    }
    let indent = INDENT;
    let literal = !line_length_over_limit(&v, indent.len());
    if v.is_empty() {
        return if literal { "|\n".into() } else { ">\n".into() };
    }
    let mut end_start = v.len();
    while end_start > 0 && matches!(v[end_start - 1], '\n' | '\t' | ' ') {
        end_start -= 1;
    }
    let mut end: String = v[end_start..].iter().collect();
    let chomp = match end.find('\n') {
        None => "-",
        Some(p) if end_start == 0 || p != end.len() - 1 => "+",
        Some(_) => "",
    };
    let mut body: Vec<char> = v[..end_start].to_vec();
    if !end.is_empty() {
        if end.ends_with('\n') {
            end.pop();
        }
        // `(^|(?<!\n))\n+(?!\n|$)` → `$&` + indent: each run of newlines not at the end.
        let ec = chars(&end);
        let mut out = String::new();
        let mut i = 0;
        while i < ec.len() {
            if ec[i] == '\n' {
                let run_end = i + ec[i..].iter().take_while(|&&c| c == '\n').count();
                out.extend(&ec[i..run_end]);
                if run_end < ec.len() {
                    out.push_str(indent);
                }
                i = run_end;
            } else {
                out.push(ec[i]);
                i += 1;
            }
        }
        end = out;
    }
    let mut start_with_space = false;
    let mut start_end = 0;
    let mut start_nl: Option<usize> = None;
    while start_end < body.len() {
        match body[start_end] {
            ' ' => start_with_space = true,
            '\n' => start_nl = Some(start_end),
            _ => break,
        }
        start_end += 1;
    }
    let start_len = match start_nl {
        Some(p) if p < start_end => p + 1,
        _ => start_end,
    };
    let start_len = if start_nl.is_none() {
        start_end
    } else {
        start_len
    };
    let mut start: String = body[..start_len].iter().collect();
    if !start.is_empty() {
        body = body[start_len..].to_vec();
        start = newlines_then(&start, indent);
    }
    let header = format!("{}{chomp}", if start_with_space { "2" } else { "" });
    let body_s: String = body.iter().collect();
    if !literal {
        let folded = folded_block_value(&body_s, indent);
        let mut overflow = false;
        let text = format!("{start}{folded}{end}");
        let folded_text = fold_with(&text, indent, Mode::Block, None, &mut overflow);
        if !overflow {
            return format!(">{header}\n{indent}{folded_text}");
        }
    }
    let body_s = newlines_then(&body_s, indent);
    format!("|{header}\n{indent}{start}{body_s}{end}")
}

/// The folded block's value before line folding: each line break doubled, except around
/// more-indented lines, then indented.
fn folded_block_value(value: &str, indent: &str) -> String {
    // `.replace(/\n+/g, '\n$&')`
    let mut doubled = String::new();
    let mut it = value.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\n' {
            doubled.push('\n');
            doubled.push('\n');
            while it.peek() == Some(&'\n') {
                doubled.push('\n');
                it.next();
            }
        } else {
            doubled.push(c);
        }
    }
    // `.replace(/(?:^|\n)([\t ].*)(?:([\n\t ]*)\n(?![\n\t ]))?/g, '$1$2')`: rare (lines
    // starting with whitespace); handled line by line.
    let lines: Vec<&str> = doubled.split('\n').collect();
    let mut out = String::new();
    let mut i = 0;
    let mut first = true;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with([' ', '\t']) {
            // The newline before it is dropped (unless at the start), and the blank lines
            // after it up to the next non-indented line are kept without their last break.
            out.push_str(line);
            let mut j = i + 1;
            let mut ws = String::new();
            while j < lines.len() && lines[j].chars().all(|c| c == ' ' || c == '\t') {
                if j + 1 < lines.len() {
                    ws.push('\n');
                    ws.push_str(lines[j]);
                    j += 1;
                } else {
                    break;
                }
            }
            if j < lines.len() && !lines[j].starts_with([' ', '\t']) && !lines[j].is_empty() {
                out.push_str(&ws);
                i = j;
                first = false;
                // the line at j is appended without a newline
                out.push_str(lines[j]);
                i += 1;
                continue;
            }
            i += 1;
            first = false;
            continue;
        }
        if !first {
            out.push('\n');
        }
        out.push_str(line);
        first = false;
        i += 1;
    }
    newlines_then(&out, indent)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Flow,
    Block,
    Quoted,
}

fn fold(text: &str, indent: &str, mode: Mode, at_start: Option<usize>) -> String {
    let mut overflow = false;
    fold_with(text, indent, mode, at_start, &mut overflow)
}

/// `foldFlowLines` of the reference's YAML library.
fn fold_with(
    text: &str,
    indent: &str,
    mode: Mode,
    at_start: Option<usize>,
    overflow: &mut bool,
) -> String {
    let t = chars(text);
    let end_step = (1 + MIN_CONTENT_WIDTH).max(1 + LINE_WIDTH - indent.len());
    if t.len() <= end_step {
        return text.to_owned();
    }
    let mut folds: Vec<usize> = Vec::new();
    let mut escaped_folds = std::collections::HashSet::new();
    let mut end = LINE_WIDTH - indent.len();
    if let Some(s) = at_start {
        if s > LINE_WIDTH - 2usize.max(MIN_CONTENT_WIDTH) {
            folds.push(0);
        } else {
            end = LINE_WIDTH - s;
        }
    }
    let mut split: Option<usize> = None;
    let mut prev: Option<char> = None;
    let mut i: isize = -1;
    let mut esc_start: isize = -1;
    let mut esc_end: isize = -1;
    if mode == Mode::Block {
        let j = consume_more_indented(&t, i, indent.len());
        if j != -1 {
            end = (j as usize) + end_step;
        }
        i = j;
    }
    let at = |k: isize| -> Option<char> {
        if k < 0 {
            None
        } else {
            t.get(k as usize).copied()
        }
    };
    loop {
        i += 1;
        let Some(mut ch) = at(i) else { break };
        if mode == Mode::Quoted && ch == '\\' {
            esc_start = i;
            match at(i + 1) {
                Some('x') => i += 3,
                Some('u') => i += 5,
                Some('U') => i += 9,
                _ => i += 1,
            }
            esc_end = i;
        }
        if ch == '\n' {
            if mode == Mode::Block {
                i = consume_more_indented(&t, i, indent.len());
            }
            end = (i + indent.len() as isize + end_step as isize) as usize;
            split = None;
        } else {
            if ch == ' ' && prev.is_some_and(|p| p != ' ' && p != '\n' && p != '\t') {
                if let Some(next) = at(i + 1) {
                    if next != ' ' && next != '\n' && next != '\t' {
                        split = Some(i as usize);
                    }
                }
            }
            if i as usize >= end {
                if let Some(s) = split.filter(|&s| s > 0) {
                    folds.push(s);
                    end = s + end_step;
                    split = None;
                } else if mode == Mode::Quoted {
                    while prev == Some(' ') || prev == Some('\t') {
                        prev = Some(ch);
                        i += 1;
                        match at(i) {
                            Some(c) => ch = c,
                            None => break,
                        }
                        *overflow = true;
                    }
                    let j = if i > esc_end + 1 {
                        i - 2
                    } else {
                        esc_start - 1
                    };
                    if j < 0 || !escaped_folds.insert(j as usize) {
                        return text.to_owned();
                    }
                    folds.push(j as usize);
                    end = j as usize + end_step;
                    split = None;
                } else {
                    *overflow = true;
                }
            }
        }
        prev = Some(ch);
    }
    if folds.is_empty() {
        return text.to_owned();
    }
    let mut res: String = t[..folds[0]].iter().collect();
    for (k, &f) in folds.iter().enumerate() {
        let stop = folds.get(k + 1).copied().unwrap_or(t.len());
        if f == 0 {
            res = format!("\n{indent}{}", t[..stop].iter().collect::<String>());
        } else {
            if mode == Mode::Quoted && escaped_folds.contains(&f) {
                res.push(t[f]);
                res.push('\\');
            }
            res.push('\n');
            res.push_str(indent);
            res.extend(&t[f + 1..stop]);
        }
    }
    res
}

/// `consumeMoreIndentedLines`: the index of the last newline of a more-indented block that
/// starts at `i + 1`, else `i`.
fn consume_more_indented(t: &[char], mut i: isize, indent: usize) -> isize {
    let mut end = i;
    let mut start = i + 1;
    let get = |k: isize| t.get(k as usize).copied();
    let mut ch = get(start);
    while ch == Some(' ') || ch == Some('\t') {
        if i < start + indent as isize {
            i += 1;
            ch = get(i);
        } else {
            loop {
                i += 1;
                ch = get(i);
                if ch.is_none() || ch == Some('\n') {
                    break;
                }
            }
            end = i;
            start = i + 1;
            ch = get(start);
        }
    }
    end
}

/// The `status` a GOAL.yaml holds, read tolerantly: `None` when the file is not a mapping
/// this reader understands, has no `status` or has it twice. The value is unquoted;
/// anything else (a block, an alias) reads as `None`.
pub(crate) fn read_status(text: &str) -> Option<String> {
    let mut status: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    for raw in text.lines() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line == "---" || line == "..." {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            // A continuation of the previous value (a block scalar or a folded line).
            continue;
        }
        let (key, value) = split_entry(line)?;
        if !seen.insert(key.to_owned()) {
            // The reference's parser refuses duplicate keys.
            return None;
        }
        if key == "status" {
            status = Some(scalar(value)?);
        }
    }
    status
}

/// `key: value` at column 0 (the key plain or quoted).
fn split_entry(line: &str) -> Option<(&str, &str)> {
    let (key, rest) = if let Some(r) = line.strip_prefix('"') {
        let close = r.find('"')?;
        (&r[..close], &r[close + 1..])
    } else if let Some(r) = line.strip_prefix('\'') {
        let close = r.find('\'')?;
        (&r[..close], &r[close + 1..])
    } else {
        let colon = line
            .find(": ")
            .or_else(|| line.strip_suffix(':').map(|k| k.len()))?;
        (&line[..colon], &line[colon..])
    };
    let value = rest.strip_prefix(':')?;
    if !(value.is_empty() || value.starts_with([' ', '\t'])) {
        return None;
    }
    Some((key.trim_end(), value.trim()))
}

/// A one-line scalar: plain (a trailing ` # comment` dropped), `'single'` or `"double"`.
fn scalar(v: &str) -> Option<String> {
    if let Some(r) = v.strip_prefix('\'') {
        let close = r.rfind('\'')?;
        let rest = r[close + 1..].trim();
        if !(rest.is_empty() || rest.starts_with('#')) {
            return None;
        }
        return Some(r[..close].replace("''", "'"));
    }
    if let Some(r) = v.strip_prefix('"') {
        let close = r.rfind('"')? + 1;
        let rest = v[close + 1..].trim();
        if !(rest.is_empty() || rest.starts_with('#')) {
            return None;
        }
        return serde_json::from_str::<String>(&v[..=close]).ok();
    }
    if v.starts_with(['|', '>', '&', '*', '!', '[', '{']) {
        return None;
    }
    let v = match v.find(" #") {
        Some(p) => &v[..p],
        None => v,
    };
    Some(v.trim().to_owned())
}

#[cfg(test)]
mod tests;
