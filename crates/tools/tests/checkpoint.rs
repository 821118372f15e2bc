//! Checkpoints and rewinding: a tree changed every way a command can change it (edits,
//! deletions, new files and folders, renames, permission changes, links re-pointed, a file
//! turned into a folder) comes back byte for byte, modes and links included; ignored and
//! oversized paths are left alone; nothing is read or written through a link.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use penguin_tools::checkpoint::{self, Limits, Store};

/// Every path under `root` (but `.git`): a file's mode and bytes, a link's target, a
/// folder's mode.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let meta = p.symlink_metadata().unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let what = if meta.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&p).unwrap().display())
            } else if meta.is_dir() {
                stack.push(p.clone());
                format!("dir {mode:o}")
            } else {
                format!("file {mode:o} {:?}", std::fs::read(&p).unwrap())
            };
            out.insert(rel, what);
        }
    }
    out
}

fn mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

#[test]
fn a_tree_changed_every_way_comes_back_byte_for_byte() {
    let ws = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let root = ws.path();
    std::fs::create_dir_all(root.join("src/deep")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "fn a() {}\n").unwrap();
    std::fs::write(root.join("src/deep/x.txt"), "x").unwrap();
    std::fs::write(root.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    mode(&root.join("run.sh"), 0o755);
    std::fs::write(root.join("locked.txt"), "read only").unwrap();
    mode(&root.join("locked.txt"), 0o444);
    std::fs::write(root.join("bin.dat"), [0u8, 255, 1, 2]).unwrap();
    symlink("src/lib.rs", root.join("link")).unwrap();
    symlink("nowhere", root.join("dangling")).unwrap();
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir_all(root.join("target")).unwrap();
    std::fs::write(root.join("target/build.o"), "object").unwrap();
    std::fs::write(root.join("big.bin"), vec![7u8; 2048]).unwrap();
    let before = tree(root);

    let store = Store::new(data.path());
    let limits = Limits {
        max_file_bytes: 1024,
        ..Limits::default()
    };
    let cp = checkpoint::take(root, &store, None, &limits).unwrap();
    assert!(!cp.entries.contains_key("target/build.o"), "ignored");
    assert_eq!(cp.skipped.len(), 1, "{:?}", cp.skipped);
    assert_eq!(cp.skipped[0].path, "big.bin");

    // Every kind of change a command makes.
    std::fs::write(root.join("src/lib.rs"), "fn b() {}\n").unwrap();
    std::fs::remove_file(root.join("src/deep/x.txt")).unwrap();
    std::fs::rename(root.join("bin.dat"), root.join("moved.dat")).unwrap();
    mode(&root.join("run.sh"), 0o644);
    std::fs::remove_file(root.join("link")).unwrap();
    symlink("/etc/passwd", root.join("link")).unwrap();
    std::fs::remove_dir(root.join("empty")).unwrap();
    std::fs::write(root.join("empty"), "now a file").unwrap();
    std::fs::create_dir_all(root.join("new/inner")).unwrap();
    std::fs::write(root.join("new/inner/f"), "f").unwrap();
    std::fs::write(root.join("target/build.o"), "rebuilt").unwrap();
    std::fs::write(root.join("big.bin"), vec![8u8; 2048]).unwrap();
    // A second checkpoint stores only what changed.
    let objects = |d: &Path| walk_count(&d.join("objects"));
    let stored = objects(data.path());
    let later = checkpoint::take(root, &store, Some(&cp), &limits).unwrap();
    // New: src/lib.rs, the file `empty` became, new/inner/f; moved.dat is bin.dat's content.
    assert_eq!(objects(data.path()), stored + 3);
    assert_ne!(later, cp);

    let plan = checkpoint::plan(root, &store, &cp).unwrap();
    assert!(plan.restore.contains(&"src/lib.rs".to_owned()), "{plan:?}");
    assert!(plan.restore.contains(&"run.sh".to_owned()), "{plan:?}");
    assert!(plan.restore.contains(&"link".to_owned()), "{plan:?}");
    assert!(plan.restore.contains(&"empty".to_owned()), "{plan:?}");
    assert!(plan.remove.contains(&"moved.dat".to_owned()), "{plan:?}");
    assert!(plan.remove.contains(&"new/inner/f".to_owned()), "{plan:?}");
    assert!(
        !plan.remove.iter().any(|p| p.starts_with("target")),
        "{plan:?}"
    );
    assert_eq!(plan.left_alone.len(), 1);

    let failed = checkpoint::apply(root, &store, &cp, &plan).unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    let mut after = tree(root);
    // Left alone: the ignored build output and the file too large to keep.
    assert_eq!(
        after.remove("target/build.o").unwrap(),
        format!("file 644 {:?}", b"rebuilt")
    );
    assert_eq!(
        after.remove("big.bin").unwrap(),
        format!("file 644 {:?}", vec![8u8; 2048])
    );
    let mut before = before;
    before.remove("target/build.o");
    before.remove("big.bin");
    assert_eq!(after, before);
    assert!(checkpoint::plan(root, &store, &cp).unwrap().is_empty());
}

#[test]
fn a_rewind_writes_nothing_through_a_link_a_command_planted() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let root = ws.path();
    std::fs::create_dir_all(root.join("dir")).unwrap();
    std::fs::write(root.join("dir/f.txt"), "mine").unwrap();
    let store = Store::new(data.path());
    let cp = checkpoint::take(root, &store, None, &Limits::default()).unwrap();
    // The folder becomes a link to a folder outside.
    std::fs::remove_dir_all(root.join("dir")).unwrap();
    symlink(outside.path(), root.join("dir")).unwrap();
    let plan = checkpoint::plan(root, &store, &cp).unwrap();
    let failed = checkpoint::apply(root, &store, &cp, &plan).unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing went outside"
    );
    assert!(root.join("dir").symlink_metadata().unwrap().is_dir());
    assert_eq!(
        std::fs::read_to_string(root.join("dir/f.txt")).unwrap(),
        "mine"
    );
}

fn walk_count(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn a_store_inside_the_workspace_is_neither_kept_nor_removed() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    let store = Store::new(root.join("data/checkpoints"));
    let cp = checkpoint::take(&root, &store, None, &Limits::default()).unwrap();
    store.save("session-x", &cp).unwrap();
    let again = checkpoint::take(&root, &store, Some(&cp), &Limits::default()).unwrap();
    assert!(
        again
            .entries
            .keys()
            .all(|p| !p.starts_with("data/checkpoints/")),
        "{:?}",
        again.entries.keys()
    );
    let plan = checkpoint::plan(&root, &store, &cp).unwrap();
    assert!(
        plan.remove
            .iter()
            .all(|p| !p.starts_with("data/checkpoints")),
        "{plan:?}"
    );
    let failed = checkpoint::apply(&root, &store, &cp, &plan).unwrap();
    assert_eq!(
        store.list("session-x").unwrap(),
        (vec![cp], vec![]),
        "{plan:?} {failed:?}"
    );
}

/// Every stored content, made `hours` old.
fn age_objects(store: &Path, hours: u64) {
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(hours * 3600);
    for shard in std::fs::read_dir(store.join("objects")).unwrap() {
        for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let f = std::fs::File::options()
                .write(true)
                .open(f.unwrap().path())
                .unwrap();
            f.set_modified(then).unwrap();
        }
    }
}

fn objects(store: &Path) -> usize {
    std::fs::read_dir(store.join("objects"))
        .unwrap()
        .map(|s| std::fs::read_dir(s.unwrap().path()).unwrap().count())
        .sum()
}

#[test]
fn a_store_past_its_bound_drops_the_oldest_sessions_checkpoints_first() {
    let ws = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let store = Store::new(data.path());
    // Three sessions, oldest first, each checkpointing its own 1 KiB file.
    for (n, session) in ["s-old", "s-mid", "s-now"].iter().enumerate() {
        std::fs::write(ws.path().join("f.txt"), vec![b'a' + n as u8; 1024]).unwrap();
        let m = checkpoint::take(ws.path(), &store, None, &Limits::default()).unwrap();
        store.save(session, &m).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(objects(data.path()), 3);
    // Within the bound: nothing goes.
    assert_eq!(store.prune(1 << 20, "s-now").unwrap(), Default::default());
    // Contents just stored stay while a checkpoint may still be naming them...
    let pruned = store.prune(2048, "s-now").unwrap();
    assert_eq!(pruned.sessions, ["s-old"]);
    assert_eq!((pruned.objects, objects(data.path())), (0, 3));
    assert!(store.list("s-old").unwrap().0.is_empty());
    // ...and go once they are old and nothing names them.
    age_objects(data.path(), 2);
    let pruned = store.prune(1024, "s-now").unwrap();
    assert_eq!(pruned.sessions, ["s-mid"], "the running session's are kept");
    assert_eq!((pruned.objects, pruned.bytes), (2, 2048));
    assert_eq!(objects(data.path()), 1);
    assert_eq!(store.list("s-now").unwrap().0.len(), 1);
    // Even over the bound, the running session keeps its checkpoints.
    assert!(store.prune(0, "s-now").unwrap().sessions.is_empty());
}

#[test]
fn ignored_trees_are_kept_and_rewound_only_by_a_checkpoint_that_keeps_them() {
    let ws = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let store = Store::new(data.path());
    std::fs::write(ws.path().join(".gitignore"), "build/\n").unwrap();
    std::fs::create_dir(ws.path().join("build")).unwrap();
    std::fs::write(ws.path().join("build/a.o"), "old").unwrap();
    let plain = checkpoint::take(ws.path(), &store, None, &Limits::default()).unwrap();
    assert!(!plain.include_ignored);
    assert!(!plain.entries.contains_key("build/a.o"));
    let all = Limits {
        include_ignored: true,
        ..Limits::default()
    };
    let kept = checkpoint::take(ws.path(), &store, None, &all).unwrap();
    assert!(kept.include_ignored && kept.entries.contains_key("build/a.o"));
    // The build changes: only the checkpoint that kept it rewinds it.
    std::fs::write(ws.path().join("build/a.o"), "new").unwrap();
    std::fs::write(ws.path().join("build/b.o"), "made").unwrap();
    assert!(checkpoint::plan(ws.path(), &store, &plain)
        .unwrap()
        .is_empty());
    let plan = checkpoint::plan(ws.path(), &store, &kept).unwrap();
    assert_eq!(plan.restore, ["build/a.o"]);
    assert_eq!(plan.remove, ["build/b.o"]);
    checkpoint::apply(ws.path(), &store, &kept, &plan).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.path().join("build/a.o")).unwrap(),
        "old"
    );
    assert!(!ws.path().join("build/b.o").exists());
}
