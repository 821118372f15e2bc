//! `penguin` in a pseudo-terminal (util-linux `script`), as a person runs it: keys in, the
//! screen out; every wait reads the screen until what it waits for is there (bounded).

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Pty {
    child: Child,
    stdin: ChildStdin,
    out: Arc<Mutex<Vec<u8>>>,
}

/// The text of a terminal stream without its escape sequences and carriage returns.
pub fn strip(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

impl Pty {
    /// `penguin ARGS` in `dir`, with `home` as its home and data root; `tmp` as its `TMPDIR`
    /// when given.
    #[allow(dead_code)]
    pub fn spawn(home: &Path, dir: &Path, args: &str) -> Pty {
        Pty::spawn_with(home, dir, args, None)
    }

    pub fn spawn_with(home: &Path, dir: &Path, args: &str, tmp: Option<&Path>) -> Pty {
        if Command::new("script").arg("--version").output().is_err() {
            panic!("util-linux `script` is required for the pseudo-terminal tests");
        }
        // A fixed size: a new pseudo-terminal is 0x0, which no person's terminal is.
        let cmdline = format!(
            "stty cols 120 rows 40; exec {} {args}",
            env!("CARGO_BIN_EXE_penguin")
        );
        let mut cmd = Command::new("script");
        cmd.args(["-qfec", &cmdline, "/dev/null"])
            .current_dir(dir)
            .env("PENGUIN_HOME", home)
            .env("HOME", home)
            .env("TERM", "xterm-256color")
            .env("PENGUIN_STUB_KEY", "k")
            .env_remove("NO_COLOR")
            .env_remove("PENGUIN_MODEL")
            .env_remove("PENGUIN_PROVIDER")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(tmp) = tmp {
            cmd.env("TMPDIR", tmp);
        }
        let mut child = cmd.spawn().expect("script starts");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        // A watchdog, so a hang fails the test instead of stalling the suite.
        let pid = child.id();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(120));
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        });
        Pty { child, stdin, out }
    }

    /// The screen as written, escape sequences included.
    #[allow(dead_code)]
    pub fn raw(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    pub fn text(&self) -> String {
        strip(&self.out.lock().unwrap())
    }

    pub fn send(&mut self, keys: &str) {
        self.stdin.write_all(keys.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Waits until `ok` holds, reading the screen; fails naming `what` after 30 s.
    pub fn until(&self, what: &str, ok: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text();
            if ok(&text) {
                return;
            }
            if Instant::now() > deadline {
                panic!("never saw {what}:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `needle` has appeared `n` times.
    pub fn wait_n(&self, needle: &str, n: usize) {
        self.until(&format!("{needle:?} ×{n}"), |t| {
            t.matches(needle).count() >= n
        })
    }

    #[allow(dead_code)]
    pub fn wait(&self, needle: &str) {
        self.wait_n(needle, 1)
    }

    /// Waits for the prompt that follows the `n`-th occurrence of `after`.
    #[allow(dead_code)]
    pub fn wait_prompt_after(&self, after: &str, n: usize) {
        self.until(&format!("a prompt after {after:?} ×{n}"), |text| {
            text.match_indices(after)
                .nth(n - 1)
                .is_some_and(|(i, _)| text[i..].contains("› "))
        })
    }

    /// Waits for the program to end, which must succeed; the whole screen.
    pub fn finish(mut self) -> String {
        let status = self.child.wait().unwrap();
        let text = self.text();
        assert!(status.success(), "{text}");
        text
    }
}
