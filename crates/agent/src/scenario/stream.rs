//! Reading a scenario file without holding its text. A large file is mostly its scripts
//! (`llm`, `tools`): each request and each tool is cut out of the file as it is read, parsed
//! from its own bytes (on a second thread when it has room, else here) and dropped, so the file's text never
//! sits in memory beside the messages made from it.
//!
//! This path only says yes: anything it does not expect (a malformed file, a script error, a
//! duplicate key) answers `None`, and the caller parses the whole text with
//! [`Scenario::parse`], which names what is wrong.

// The door (clippy.toml) is for paths a command can change: this reads the scenario file the
// user names.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::mpsc;

use penguin_engine::scripted::ScriptedEnvironment;
use penguin_llm_providers::scripted::{
    parse_request_json, parse_tool_stream_json, ScriptedModel, ScriptedRequest, Step,
};

use super::Scenario;

/// The scenario in `path`, or `None` when only the whole-text parse can tell what it is.
pub(super) fn read(path: &Path) -> std::io::Result<Option<Scenario>> {
    let mut scan = Scanner::new(std::fs::File::open(path)?);
    let mut requests: Vec<Option<ScriptedRequest>> = Vec::new();
    let mut tools: HashMap<String, Vec<Step>> = HashMap::new();
    let mut rest: Vec<(String, Vec<u8>)> = Vec::new();
    let mut failed = false;
    std::thread::scope(|s| -> std::io::Result<()> {
        let (to_helper, inbox) = mpsc::sync_channel::<Piece>(4);
        let (to_main, parsed) = mpsc::channel::<Parsed>();
        s.spawn(move || {
            for piece in inbox {
                if to_main.send(piece.parse()).is_err() {
                    return;
                }
            }
        });
        let mut take = |p: Parsed| match p {
            Parsed::Request(i, Some(r)) => {
                if requests.len() <= i {
                    requests.resize_with(i + 1, || None);
                }
                requests[i] = Some(r);
            }
            Parsed::Tool(id, Some(steps)) => {
                failed |= tools.insert(id, steps).is_some();
            }
            Parsed::Request(_, None) | Parsed::Tool(_, None) => failed = true,
        };
        // A script goes to the helper when it has room for one, else it is parsed here
        // between reads: the two share the work whatever their speeds.
        let outcome = scan.top_level(&mut rest, &mut |piece| match to_helper.try_send(piece) {
            Ok(()) => {}
            Err(mpsc::TrySendError::Full(piece) | mpsc::TrySendError::Disconnected(piece)) => {
                take(piece.parse())
            }
        });
        drop(to_helper);
        for p in parsed.iter() {
            take(p);
        }
        if !outcome? {
            failed = true;
        }
        Ok(())
    })?;
    if failed {
        return Ok(None);
    }
    // Everything but the scripts, with empty scripts in their place, goes through the one
    // parser of scenario fields.
    let mut text = Vec::from(&b"{"[..]);
    for (key, value) in &rest {
        if matches!(key.as_str(), "llm" | "tools") {
            continue;
        }
        text.extend_from_slice(serde_json::to_string(key).unwrap_or_default().as_bytes());
        text.push(b':');
        text.extend_from_slice(value);
        text.push(b',');
    }
    for (key, empty) in [("llm", "[]"), ("tools", "{}")] {
        if rest.iter().any(|(k, _)| k == key) {
            text.extend_from_slice(format!("\"{key}\":{empty},").as_bytes());
        }
    }
    if text.len() > 1 {
        text.pop();
    }
    text.push(b'}');
    let Ok(text) = String::from_utf8(text) else {
        return Ok(None);
    };
    let Ok(mut scenario) = Scenario::parse(&text) else {
        return Ok(None);
    };
    let Some(requests) = requests.into_iter().collect::<Option<Vec<_>>>() else {
        return Ok(None);
    };
    scenario.llm = ScriptedModel::new(requests);
    scenario.tools = ScriptedEnvironment::new(tools);
    Ok(Some(scenario))
}

/// One script cut out of the file.
enum Piece {
    Request(usize, Vec<u8>),
    Tool(String, Vec<u8>),
}

/// A script parsed; `None` when it did not parse.
enum Parsed {
    Request(usize, Option<ScriptedRequest>),
    Tool(String, Option<Vec<Step>>),
}

impl Piece {
    fn parse(self) -> Parsed {
        match self {
            Piece::Request(i, bytes) => Parsed::Request(
                i,
                std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|t| parse_request_json(t, &format!("llm[{i}]")).ok()),
            ),
            Piece::Tool(id, bytes) => {
                let steps = std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|t| parse_tool_stream_json(t, &id))
                    .and_then(Result::ok);
                Parsed::Tool(id, steps)
            }
        }
    }
}

/// Finds where JSON values begin and end (strings, nesting), without checking them: each
/// value's own parse does that.
struct Scanner<R> {
    source: R,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// While a value is being cut out: where it starts in `buf`.
    cut: Option<usize>,
    /// What of the value being cut out earlier reads held.
    held: Vec<u8>,
}

const CHUNK: usize = 1 << 18;

/// Bytes that open, close or quote (`"{}[]`).
const NESTING: u8 = 1;
/// Bytes that end a scalar besides a closing bracket (`,` and whitespace).
const SCALAR_END: u8 = 2;
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'"' as usize] = NESTING;
    t[b'{' as usize] = NESTING;
    t[b'}' as usize] = NESTING;
    t[b'[' as usize] = NESTING;
    t[b']' as usize] = NESTING;
    t[b',' as usize] = SCALAR_END;
    t[b' ' as usize] = SCALAR_END;
    t[b'\t' as usize] = SCALAR_END;
    t[b'\n' as usize] = SCALAR_END;
    t[b'\r' as usize] = SCALAR_END;
    t
};

/// Where the first `"` or `\\` of `bytes` is. Most strings are a few bytes long: their first
/// bytes are looked at one by one before the search is handed to `memchr`.
fn string_end(bytes: &[u8]) -> Option<usize> {
    const NEAR: usize = 16;
    let near = &bytes[..bytes.len().min(NEAR)];
    match near.iter().position(|&b| b == b'"' || b == b'\\') {
        Some(i) => Some(i),
        None if bytes.len() <= NEAR => None,
        None => memchr::memchr2(b'"', b'\\', &bytes[NEAR..]).map(|i| i + NEAR),
    }
}

impl<R: Read> Scanner<R> {
    fn new(source: R) -> Scanner<R> {
        Scanner {
            source,
            buf: vec![0; CHUNK],
            pos: 0,
            len: 0,
            cut: None,
            held: Vec::new(),
        }
    }

    /// The next byte without taking it; `None` at the end of the file.
    #[inline]
    fn peek(&mut self) -> std::io::Result<Option<u8>> {
        if self.pos < self.len {
            return Ok(Some(self.buf[self.pos]));
        }
        self.read_more()
    }

    /// Reads the next block, once the last is passed.
    #[cold]
    fn read_more(&mut self) -> std::io::Result<Option<u8>> {
        if let Some(from) = self.cut {
            // The value being cut out goes on past this read.
            self.held.extend_from_slice(&self.buf[from..self.len]);
            self.cut = Some(0);
        }
        self.pos = 0;
        self.len = loop {
            match self.source.read(&mut self.buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        Ok((self.len > 0).then(|| self.buf[0]))
    }

    fn skip_ws(&mut self) -> std::io::Result<Option<u8>> {
        while let Some(b) = self.peek()? {
            if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                return Ok(Some(b));
            }
            self.pos += 1;
        }
        Ok(None)
    }

    /// Takes `want` after optional whitespace; false when something else comes.
    fn eat(&mut self, want: u8) -> std::io::Result<bool> {
        if self.skip_ws()? == Some(want) {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// Starts cutting out the value at the current position: the bytes from here on are
    /// copied once, in as few pieces as reads allow, by [`Scanner::end_cut`].
    fn begin_cut(&mut self) {
        self.cut = Some(self.pos);
    }

    /// The bytes since [`Scanner::begin_cut`].
    fn end_cut(&mut self) -> Vec<u8> {
        let from = self.cut.take().unwrap_or(self.pos);
        let mut bytes = std::mem::take(&mut self.held);
        bytes.extend_from_slice(&self.buf[from..self.pos]);
        bytes
    }

    /// Passes a string (its quotes included); false when the file ends inside it.
    fn string(&mut self) -> std::io::Result<bool> {
        self.pos += 1;
        loop {
            if self.peek()?.is_none() {
                return Ok(false);
            }
            let chunk = &self.buf[self.pos..self.len];
            match string_end(chunk) {
                None => self.pos = self.len,
                Some(i) => {
                    self.pos += i + 1;
                    if chunk[i] == b'"' {
                        return Ok(true);
                    }
                    // The escaped byte, whatever it is, cannot end the string.
                    if self.peek()?.is_none() {
                        return Ok(false);
                    }
                    self.pos += 1;
                }
            }
        }
    }

    /// Cuts out one value; `None` when it is cut short.
    fn value(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        self.begin_cut();
        let whole = self.pass_value()?;
        let bytes = self.end_cut();
        Ok(whole.then_some(bytes))
    }

    /// Passes one value; false when it is cut short.
    fn pass_value(&mut self) -> std::io::Result<bool> {
        let mut depth = 0usize;
        // Whether anything was passed: a scalar is not empty.
        let mut any = false;
        loop {
            if self.peek()?.is_none() {
                // Only a scalar may end with the file; the caller then finds nothing after it.
                return Ok(depth == 0 && any);
            }
            // Up to the next byte that matters here.
            let chunk = &self.buf[self.pos..self.len];
            let stops = if depth == 0 {
                NESTING | SCALAR_END
            } else {
                NESTING
            };
            let Some(i) = chunk
                .iter()
                .position(|&b| CLASS[usize::from(b)] & stops != 0)
            else {
                any = true;
                self.pos = self.len;
                continue;
            };
            any |= i > 0;
            self.pos += i;
            match chunk[i] {
                b'"' => {
                    if !self.string()? {
                        return Ok(false);
                    }
                    if depth == 0 {
                        return Ok(true);
                    }
                }
                b'{' | b'[' => {
                    depth += 1;
                    any = true;
                    self.pos += 1;
                }
                b'}' | b']' => {
                    if depth == 0 {
                        // A scalar ends where its container does.
                        return Ok(any);
                    }
                    depth -= 1;
                    self.pos += 1;
                    if depth == 0 {
                        return Ok(true);
                    }
                }
                // `,` or whitespace after a scalar.
                _ => return Ok(any),
            }
        }
    }

    /// A key: a string, then `:`. `None` when it is not one.
    fn key(&mut self) -> std::io::Result<Option<String>> {
        if self.skip_ws()? != Some(b'"') {
            return Ok(None);
        }
        self.begin_cut();
        let whole = self.string()?;
        let raw = self.end_cut();
        if !whole || !self.eat(b':')? {
            return Ok(None);
        }
        Ok(serde_json::from_slice(&raw).ok())
    }

    /// After a member or element: true for `,`, false for `close`; `None` for anything else.
    fn next_or_close(&mut self, close: u8) -> std::io::Result<Option<bool>> {
        match self.skip_ws()? {
            Some(b',') => {
                self.pos += 1;
                Ok(Some(true))
            }
            Some(b) if b == close => {
                self.pos += 1;
                Ok(Some(false))
            }
            _ => Ok(None),
        }
    }

    /// The top-level object: `llm` elements and `tools` members to `script`, every other
    /// member (and `llm`/`tools` themselves, with an empty value) to `rest`. False when the file is
    /// not one object of that shape.
    fn top_level(
        &mut self,
        rest: &mut Vec<(String, Vec<u8>)>,
        script: &mut dyn FnMut(Piece),
    ) -> std::io::Result<bool> {
        if !self.eat(b'{')? {
            return Ok(false);
        }
        if self.skip_ws()? == Some(b'}') {
            self.pos += 1;
            return Ok(self.skip_ws()?.is_none());
        }
        loop {
            let Some(key) = self.key()? else {
                return Ok(false);
            };
            if rest.iter().any(|(k, _)| *k == key) {
                return Ok(false);
            }
            let value = match key.as_str() {
                "llm" => self.elements(script)?.then(Vec::new),
                "tools" => self.members(script)?.then(Vec::new),
                _ => {
                    self.skip_ws()?;
                    self.value()?
                }
            };
            let Some(value) = value else {
                return Ok(false);
            };
            rest.push((key, value));
            match self.next_or_close(b'}')? {
                Some(true) => continue,
                Some(false) => return Ok(self.skip_ws()?.is_none()),
                None => return Ok(false),
            }
        }
    }

    /// The `llm` array, one request at a time.
    fn elements(&mut self, script: &mut dyn FnMut(Piece)) -> std::io::Result<bool> {
        if !self.eat(b'[')? {
            return Ok(false);
        }
        if self.skip_ws()? == Some(b']') {
            self.pos += 1;
            return Ok(true);
        }
        for i in 0.. {
            self.skip_ws()?;
            let Some(value) = self.value()? else {
                return Ok(false);
            };
            script(Piece::Request(i, value));
            match self.next_or_close(b']')? {
                Some(true) => {}
                Some(false) => return Ok(true),
                None => return Ok(false),
            }
        }
        Ok(false)
    }

    /// The `tools` object, one tool at a time.
    fn members(&mut self, script: &mut dyn FnMut(Piece)) -> std::io::Result<bool> {
        if !self.eat(b'{')? {
            return Ok(false);
        }
        if self.skip_ws()? == Some(b'}') {
            self.pos += 1;
            return Ok(true);
        }
        loop {
            let Some(id) = self.key()? else {
                return Ok(false);
            };
            self.skip_ws()?;
            let Some(value) = self.value()? else {
                return Ok(false);
            };
            script(Piece::Tool(id, value));
            match self.next_or_close(b'}')? {
                Some(true) => {}
                Some(false) => return Ok(true),
                None => return Ok(false),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(text: &str) -> Vec<String> {
        let mut scan = Scanner::new(text.as_bytes());
        let mut out = Vec::new();
        loop {
            if scan.skip_ws().unwrap().is_none() {
                return out;
            }
            let v = scan.value().unwrap().unwrap_or_else(|| panic!("{text}"));
            out.push(String::from_utf8(v).unwrap());
            scan.eat(b',').unwrap();
        }
    }

    #[test]
    fn values_end_where_json_says() {
        assert_eq!(
            values(r#"{"a":"}\"]"} , [1,[2,{}]], "x\\" ,12,true"#),
            [r#"{"a":"}\"]"}"#, "[1,[2,{}]]", r#""x\\""#, "12", "true"]
        );
    }

    #[test]
    fn a_value_across_many_reads_is_whole() {
        // Longer than a read, with an escape at every position relative to its boundaries.
        let long = format!("\"{}\"", "ab\\\"c".repeat(CHUNK / 2));
        assert_eq!(
            values(&format!("[{long},{long}]")),
            [format!("[{long},{long}]")]
        );
    }

    /// Hands out at most `step` bytes per read.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// However reads fall (inside keys, escapes, scripts), the pieces and the other members
    /// cut out are the file's own bytes.
    #[test]
    fn pieces_are_whole_however_reads_fall() {
        let text = r#" { "description" : "a \"q\" b", "llm": [ {"stream": [{"delay_ms": 1}]} , {"x\"y": [1, {"z": "}"}]} ],
            "tools": {"c\u0031": {"stream": []}, "c2": {"stream": [true]}}, "runs": [{"input": []}] } "#;
        let cut = |step: usize| {
            let mut scan = Scanner::new(Trickle {
                data: text.as_bytes(),
                step,
            });
            let (mut rest, mut pieces) = (Vec::new(), Vec::new());
            let ok = scan
                .top_level(&mut rest, &mut |piece| {
                    pieces.push(match piece {
                        Piece::Request(i, bytes) => (i.to_string(), bytes),
                        Piece::Tool(id, bytes) => (id, bytes),
                    })
                })
                .unwrap();
            assert!(ok, "step {step}");
            (rest, pieces)
        };
        let (rest, pieces) = cut(usize::MAX);
        let text_of = |kv: &[(String, Vec<u8>)]| -> Vec<(String, String)> {
            kv.iter()
                .map(|(k, v)| (k.clone(), String::from_utf8(v.clone()).unwrap()))
                .collect()
        };
        assert_eq!(
            text_of(&pieces),
            [
                ("0", r#"{"stream": [{"delay_ms": 1}]}"#),
                ("1", r#"{"x\"y": [1, {"z": "}"}]}"#),
                ("c1", r#"{"stream": []}"#),
                ("c2", r#"{"stream": [true]}"#),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(text_of(&rest)[0].1, r#""a \"q\" b""#);
        for step in [1, 2, 3, 5, 8] {
            let (r, p) = cut(step);
            assert_eq!(
                (text_of(&r), text_of(&p)),
                (text_of(&rest), text_of(&pieces)),
                "step {step}"
            );
        }
    }

    #[test]
    fn a_cut_or_odd_file_is_left_to_the_whole_text_parse() {
        for text in [
            r#"{"llm": [{"stream": []}"#,
            r#"{"llm": [], "llm": []}"#,
            r#"[]"#,
            r#"{"llm": [] "runs": []}"#,
            r#"{"tools": null, "llm": []}"#,
        ] {
            let mut scan = Scanner::new(text.as_bytes());
            let ok = scan.top_level(&mut Vec::new(), &mut |_| {}).unwrap();
            assert!(!ok, "{text}");
        }
    }

    // Running them needs the paused clock (`cargo test --all-features`, as CI does).
    #[cfg(feature = "scenario")]
    #[test]
    fn every_well_formed_scenario_streams_and_runs_as_its_whole_text() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if !path.to_string_lossy().ends_with(".json") {
                continue;
            }
            let streamed = read(&path).unwrap().unwrap_or_else(|| panic!("{path:?}"));
            let whole = Scenario::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let run = |s: Scenario| {
                let out = crate::scenario::run_scenario_blocking(s).unwrap();
                // Stamps are wall-clock; everything else must be the same.
                let strip = |frames: &[penguin_omni_protocol::Frame]| -> Vec<String> {
                    frames
                        .iter()
                        .map(|f| f.json().split_once(",").map(|(_, r)| r.to_owned()).unwrap())
                        .collect()
                };
                (strip(&out.stream), strip(&out.trace), out.requests.len())
            };
            assert_eq!(run(streamed), run(whole), "{path:?}");
            seen += 1;
        }
        assert!(seen > 10, "{seen}");
    }
}
