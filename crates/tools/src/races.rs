//! The check-then-use races of a hostile command against the file tools, made deterministic:
//! each test swaps a folder or file for a link (or a FIFO) exactly in the window between the
//! tool's check of a path and its use (`path::checked`), as a command watching with inotify
//! would try to. With paths opened by name after the check, each of these wrote outside the
//! workspace, overwrote penguin's data root or handed the model a secret; through the
//! workspace's door (`confined`), each is refused and nothing outside is touched.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::fs_tool::{FsCtx, FsFn};
use crate::path::{race, Workspace};

const TOKEN: &str = "penguin-server-token-1234";

struct Scene {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    data: PathBuf,
}

impl Scene {
    /// A workspace with `sub/f.txt` (and a PNG at `sub/i.png`), penguin's data root inside it
    /// at `.data` (the layout of a workspace at `$HOME`), and a folder outside it holding a
    /// secret under the same names.
    fn new() -> Scene {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (root, outside) = (base.join("ws"), base.join("outside"));
        let data = root.join(".data");
        for d in [root.join("sub"), outside.clone(), data.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(root.join("sub/f.txt"), "hello\n").unwrap();
        std::fs::write(root.join("sub/i.png"), png()).unwrap();
        std::fs::write(outside.join("f.txt"), format!("{TOKEN}\n")).unwrap();
        std::fs::write(outside.join("i.png"), png()).unwrap();
        std::fs::write(
            data.join("config.toml"),
            "[sandbox]\nmode = \"workspace-write\"\n",
        )
        .unwrap();
        std::fs::write(data.join("f.txt"), format!("{TOKEN}\n")).unwrap();
        Scene {
            _tmp: tmp,
            root,
            outside,
            data,
        }
    }

    fn ctx(&self, writes: bool) -> FsCtx {
        FsCtx {
            workspace: Workspace {
                root: self.root.clone(),
                protected: vec![self.data.clone()],
                extra: Vec::new(),
                writes,
                git_read_only: true,
            },
            max_chars: None,
            dry_run: false,
        }
    }

    /// Runs `tool` with `args`, swapping `victim` (under the workspace) for a link to
    /// `target` the first time the tool's check of a path ends at `when`.
    fn race(&self, tool: FsFn, args: Value, when: &str, victim: &str, target: &Path) -> String {
        let (when, victim, target) = (
            self.root.join(when),
            self.root.join(victim),
            target.to_path_buf(),
        );
        let mut fired = false;
        race::HOOK.with(|h| {
            *h.borrow_mut() = Some(Box::new(move |checked: &Path| {
                if !fired && checked == when {
                    fired = true;
                    let aside = victim.with_extension("moved-aside");
                    std::fs::rename(&victim, aside).unwrap();
                    std::os::unix::fs::symlink(&target, &victim).unwrap();
                }
            }))
        });
        let out = match tool(&self.ctx(true), args) {
            Ok(answer) => answer.text,
            Err(e) => format!("[error] {e}"),
        };
        race::HOOK.with(|h| *h.borrow_mut() = None);
        out
    }

    fn untouched(&self) {
        assert_eq!(
            std::fs::read_to_string(self.outside.join("f.txt")).unwrap(),
            format!("{TOKEN}\n")
        );
        let names: Vec<_> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "something was made outside: {names:?}");
        assert_eq!(
            std::fs::read_to_string(self.data.join("config.toml")).unwrap(),
            "[sandbox]\nmode = \"workspace-write\"\n"
        );
    }
}

fn png() -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    b.extend_from_slice(&1u32.to_be_bytes());
    b.extend_from_slice(&1u32.to_be_bytes());
    b.extend_from_slice(&[8, 6, 0, 0, 0]);
    b
}

#[test]
fn writes_never_land_outside_or_in_the_data_root() {
    let s = Scene::new();
    let write = json!({"path": "sub/f.txt", "content": "[sandbox]\nmode = \"off\"\n"});
    let edit = json!({"path": "sub/f.txt", "old_string": "hello", "new_string": "bye"});
    let new_file = json!({"path": "sub/config.toml", "content": "[sandbox]\nmode = \"off\"\n"});
    let patch = json!({"input": "*** Begin Patch\n*** Update File: sub/f.txt\n@@\n-hello\n+bye\n*** End Patch"});
    let cases: [(&str, FsFn, &Value); 4] = [
        ("write_file", crate::files::write_file, &write),
        ("edit_file", crate::files::edit_file, &edit),
        ("write_file (new)", crate::files::write_file, &new_file),
        ("apply_patch", crate::patch::apply_patch, &patch),
    ];
    for (name, tool, args) in cases {
        for target in [s.outside.clone(), s.data.clone()] {
            let when = args["path"].as_str().unwrap_or("sub/f.txt");
            let out = s.race(tool, args.clone(), when, "sub", &target);
            assert!(out.starts_with("[error]"), "{name} -> {target:?}: {out}");
            assert!(out.contains("symbolic link"), "{name}: {out}");
            s.untouched();
            // Back as it was for the next case.
            std::fs::remove_file(s.root.join("sub")).unwrap();
            std::fs::rename(s.root.join("sub.moved-aside"), s.root.join("sub")).unwrap();
        }
    }
    // The file itself swapped for a link: replaced, never written through.
    let out = s.race(
        crate::files::write_file,
        write.clone(),
        "sub/f.txt",
        "sub/f.txt",
        &s.outside.join("f.txt"),
    );
    assert!(out.starts_with("[error]"), "{out}");
    s.untouched();
}

#[test]
fn reads_never_hand_over_what_lies_outside() {
    let s = Scene::new();
    let read = json!({"path": "sub/f.txt"});
    let image = json!({"path": "sub/i.png"});
    for target in [s.outside.clone(), s.data.clone()] {
        let out = s.race(
            crate::files::read_file,
            read.clone(),
            "sub/f.txt",
            "sub",
            &target,
        );
        assert!(!out.contains(TOKEN), "read_file: {out}");
        assert!(out.starts_with("[error]"), "{out}");
        std::fs::remove_file(s.root.join("sub")).unwrap();
        std::fs::rename(s.root.join("sub.moved-aside"), s.root.join("sub")).unwrap();
    }
    let out = s.race(
        crate::image::read_image,
        image,
        "sub/i.png",
        "sub",
        &s.outside,
    );
    assert!(out.starts_with("[error]"), "read_image: {out}");
}

#[test]
fn searches_and_listings_stay_inside() {
    let s = Scene::new();
    std::fs::write(s.outside.join("outside-only.txt"), "x").unwrap();
    // The file swapped for a link to the secret after the walk listed it.
    let grep = json!({"pattern": "penguin-server-token"});
    let out = s.race(
        crate::search::grep_files,
        grep.clone(),
        "sub/f.txt",
        "sub/f.txt",
        &s.outside.join("f.txt"),
    );
    assert!(!out.contains(TOKEN), "grep_files: {out}");
    assert!(out.starts_with("No matches"), "{out}");
    std::fs::remove_file(s.root.join("sub/f.txt")).unwrap();
    std::fs::rename(s.root.join("sub/f.moved-aside"), s.root.join("sub/f.txt")).unwrap();
    // A folder swapped for a link before the walk goes down into it.
    let list = json!({});
    let out = s.race(crate::search::list_files, list, "sub", "sub", &s.outside);
    assert!(!out.contains("outside-only"), "list_files: {out}");
    std::fs::remove_file(s.root.join("sub")).unwrap();
    std::fs::rename(s.root.join("sub.moved-aside"), s.root.join("sub")).unwrap();
    let out = s.race(crate::search::grep_files, grep, "sub", "sub", &s.data);
    assert!(!out.contains(TOKEN), "grep_files: {out}");
}

#[test]
fn a_fifo_swapped_in_after_the_listing_does_not_hang_a_search() {
    let s = Scene::new();
    let (done, finished) = mpsc::channel();
    let root = s.root.clone();
    let ctx = s.ctx(false);
    std::thread::spawn(move || {
        let fifo = root.join("sub/f.txt");
        race::HOOK.with(|h| {
            *h.borrow_mut() = Some(Box::new(move |checked: &Path| {
                if checked == fifo && fifo.is_file() {
                    std::fs::remove_file(&fifo).unwrap();
                    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644))
                        .unwrap();
                }
            }))
        });
        let out = crate::search::grep_files(&ctx, json!({"pattern": "hello"}));
        let _ = done.send(out.map(|a| a.text));
    });
    let out = finished
        .recv_timeout(Duration::from_secs(20))
        .expect("grep_files answers at once instead of blocking on the FIFO");
    assert!(out.unwrap().starts_with("No matches"));
}
