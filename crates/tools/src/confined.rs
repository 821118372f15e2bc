//! The one door through which penguin touches a folder a command can change: the workspace,
//! the memory folders, the user's skills, anything under them.
//!
//! A [`Dir`] is a handle on a root folder, opened once. Every path below it is opened relative
//! to that handle and never through a symbolic link: `openat2(2)` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS` (Linux 5.6+), or, where the kernel lacks it, a walk that opens each
//! component from the one before with `O_NOFOLLOW`. A command racing penguin, swapping a
//! checked directory for a link between the check and the use, makes the open fail (`ELOOP`)
//! instead of sending penguin's unconfined hand elsewhere: there is no window, because nothing
//! is opened by name from outside the handle.
//!
//! Paths given here are the canonical ones the caller's confinement check already produced
//! (no link, no `..`), relative to the handle's root; a link in them *now* means somebody
//! changed the tree since, and is refused. Files are checked on their descriptor (regular file,
//! opened non-blocking, so a FIFO swapped in cannot hang a read), and writes go to a temporary
//! file beneath the same handle that is then renamed within it.
//!
//! ```
//! use penguin_tools::confined::Dir;
//! # let tmp = tempfile::tempdir().unwrap();
//! let ws = Dir::open(tmp.path()).unwrap();
//! ws.write("notes/a.txt", b"hello").unwrap();
//! assert_eq!(ws.read("notes/a.txt", 1 << 20).unwrap(), b"hello");
//! std::os::unix::fs::symlink("/etc", tmp.path().join("out")).unwrap();
//! assert!(ws.read("out/passwd", 1 << 20).is_err());
//! ```

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fchmod, mkdirat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// A root folder, held open: everything beneath it is reached through this handle.
#[derive(Clone, Debug)]
pub struct Dir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
}

/// What one entry of a folder is, as its listing says (a link is a link, never followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// A symbolic link.
    Link,
    /// A FIFO, socket or device.
    Other,
}

/// One entry of a folder.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its name in the folder.
    pub name: OsString,
    /// What it is.
    pub kind: Kind,
}

/// Set in tests to take the walk that kernels without `openat2` get.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

const DIR_FLAGS: OFlag = OFlag::O_DIRECTORY
    .union(OFlag::O_RDONLY)
    .union(OFlag::O_CLOEXEC);

impl Dir {
    /// Opens the root folder `path` (which the caller trusts: its own canonical workspace,
    /// data root or memory folder).
    pub fn open(path: impl AsRef<Path>) -> io::Result<Dir> {
        let path = path.as_ref();
        let fd = nix::fcntl::open(path, DIR_FLAGS | OFlag::O_NOFOLLOW, Mode::empty())?;
        Ok(Dir {
            fd: Arc::new(fd),
            path: path.to_path_buf(),
        })
    }

    /// The path this root was opened at (for messages; I/O never goes through it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `rel` beneath this root with `flags`, following no link anywhere on the way.
    fn open_at(&self, rel: &Path, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
        let rel = plain(rel)?;
        match self.open_plain(&rel, flags, mode) {
            // A folder expected and a link found answers `ENOTDIR`; say `ELOOP`, as for a
            // link anywhere else on the way, so every refusal reads the same.
            Err(e)
                if e.raw_os_error() == Some(Errno::ENOTDIR as i32)
                    && flags.contains(OFlag::O_DIRECTORY)
                    && self
                        .open_plain(&rel, OFlag::O_PATH, Mode::empty())
                        .and_then(|fd| File::from(fd).metadata())
                        .is_ok_and(|m| m.file_type().is_symlink()) =>
            {
                Err(Errno::ELOOP.into())
            }
            other => other,
        }
    }

    fn open_plain(&self, rel: &Path, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
        let flags = flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            use nix::fcntl::{openat2, OpenHow, ResolveFlag};
            let how = OpenHow::new().flags(flags).mode(mode).resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
            match openat2(self.fd.as_fd(), rel_or_dot(rel), how) {
                Err(Errno::ENOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
                // Some container seccomp profiles refuse openat2 with EPERM: the walk keeps
                // the same promise (and answers a real EPERM the same way).
                Err(Errno::EPERM) => {}
                other => return other.map_err(io::Error::from),
            }
        }
        // No openat2: each component from the one before, none of them a link.
        let mut names: Vec<&OsStr> = rel.iter().collect();
        let Some(last) = names.pop() else {
            return openat(self.fd.as_fd(), ".", flags, mode).map_err(io::Error::from);
        };
        let mut dir: Option<OwnedFd> = None;
        for name in names {
            let at = dir.as_ref().map_or(self.fd.as_fd(), |d| d.as_fd());
            let next = openat(
                at,
                name,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| {
                // A link opened with `O_DIRECTORY | O_NOFOLLOW` answers `ENOTDIR`; say
                // `ELOOP` as openat2 does, so both ways read the same.
                let link =
                    nix::sys::stat::fstatat(at, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK);
                io::Error::from(if e == Errno::ENOTDIR && link {
                    Errno::ELOOP
                } else {
                    e
                })
            })?;
            dir = Some(next);
        }
        let at = dir.as_ref().map_or(self.fd.as_fd(), |d| d.as_fd());
        openat(at, last, flags, mode).map_err(io::Error::from)
    }

    /// What `rel` is, a link described as itself (never followed).
    pub fn metadata(&self, rel: impl AsRef<Path>) -> io::Result<Metadata> {
        let fd = self.open_at(rel.as_ref(), OFlag::O_PATH, Mode::empty())?;
        File::from(fd).metadata()
    }

    /// Opens the regular file `rel` to read. A folder, FIFO, socket or device is refused
    /// without blocking (`InvalidInput`, naming what it is).
    pub fn open_file(&self, rel: impl AsRef<Path>) -> io::Result<File> {
        let rel = rel.as_ref();
        let fd = self.open_at(rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty())?;
        let file = File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: {}", rel.display(), not_regular(&meta)),
            ));
        }
        Ok(file)
    }

    /// The bytes of the regular file `rel`, refused past `max` bytes.
    pub fn read(&self, rel: impl AsRef<Path>, max: u64) -> io::Result<Vec<u8>> {
        let rel = rel.as_ref();
        let file = self.open_file(rel)?;
        let len = file.metadata()?.len();
        if len > max {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("{}: {len} bytes, more than {max}", rel.display()),
            ));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        // Bounded even if the file grows while it is read.
        file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("{}: grew past {max} bytes while read", rel.display()),
            ));
        }
        Ok(bytes)
    }

    /// The folder `rel` as a handle of its own (`""` or `"."`: this one again).
    pub fn open_dir(&self, rel: impl AsRef<Path>) -> io::Result<Dir> {
        let rel = rel.as_ref();
        let fd = self.open_at(rel, DIR_FLAGS, Mode::empty())?;
        Ok(Dir {
            fd: Arc::new(fd),
            path: self.path.join(rel),
        })
    }

    /// The entries of this folder (`.` and `..` left out), in no particular order.
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        use nix::dir::Type;
        let fd = openat(self.fd.as_fd(), ".", DIR_FLAGS, Mode::empty())?;
        let mut dir = nix::dir::Dir::from_fd(fd)?;
        let mut out = Vec::new();
        for entry in dir.iter() {
            let entry = entry?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            let kind = match entry.file_type() {
                Some(Type::File) => Kind::File,
                Some(Type::Directory) => Kind::Dir,
                Some(Type::Symlink) => Kind::Link,
                Some(_) => Kind::Other,
                // Some filesystems do not say in the listing: ask, without following.
                None => match self.metadata(name) {
                    Ok(m) => kind_of(&m),
                    Err(_) => continue,
                },
            };
            out.push(Entry {
                name: name.to_owned(),
                kind,
            });
        }
        Ok(out)
    }

    /// Creates the folder `rel` and its missing ancestors beneath this root; returns the ones
    /// it made, outermost first, so a failed change can remove them again
    /// ([`Dir::remove_dirs`]).
    pub fn create_dirs(&self, rel: impl AsRef<Path>) -> io::Result<Vec<PathBuf>> {
        let rel = plain(rel.as_ref())?;
        let mut made = Vec::new();
        let mut at = PathBuf::new();
        for name in rel.iter() {
            let parent = self.open_dir(&at)?;
            at.push(name);
            match mkdirat(parent.fd.as_fd(), name, Mode::from_bits_truncate(0o777)) {
                Ok(()) => made.push(at.clone()),
                Err(Errno::EEXIST) => {}
                Err(e) => {
                    self.remove_dirs(&made);
                    return Err(e.into());
                }
            }
        }
        Ok(made)
    }

    /// Removes folders [`Dir::create_dirs`] made, innermost first, as long as they are empty.
    pub fn remove_dirs(&self, made: &[PathBuf]) {
        for d in made.iter().rev() {
            if let Ok((parent, name)) = self.parent_of(d) {
                let _ = unlinkat(parent.fd.as_fd(), name, UnlinkatFlags::RemoveDir);
            }
        }
    }

    /// The handle of `rel`'s folder and `rel`'s last name.
    fn parent_of<'a>(&self, rel: &'a Path) -> io::Result<(Dir, &'a OsStr)> {
        let name = rel.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{:?} names no file", rel.display().to_string()),
            )
        })?;
        let parent = rel.parent().unwrap_or(Path::new(""));
        Ok((self.open_dir(parent)?, name))
    }

    /// Where the link `rel` points (the link itself is read, never followed).
    pub fn read_link(&self, rel: impl AsRef<Path>) -> io::Result<PathBuf> {
        let (parent, name) = self.parent_of(rel.as_ref())?;
        nix::fcntl::readlinkat(parent.fd.as_fd(), name)
            .map(PathBuf::from)
            .map_err(io::Error::from)
    }

    /// Makes `rel` a symbolic link to `target` (which is stored, not followed); its folder
    /// must exist and nothing may be at `rel`.
    pub fn symlink(&self, rel: impl AsRef<Path>, target: impl AsRef<Path>) -> io::Result<()> {
        let (parent, name) = self.parent_of(rel.as_ref())?;
        nix::unistd::symlinkat(target.as_ref(), parent.fd.as_fd(), name).map_err(io::Error::from)
    }

    /// Sets the permission bits of the file or folder `rel` (a link is refused, not followed).
    /// A file its owner may neither read nor write cannot be opened to be changed: an error.
    pub fn set_mode(&self, rel: impl AsRef<Path>, mode: u32) -> io::Result<()> {
        let rel = rel.as_ref();
        let fd = self
            .open_at(rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty())
            .or_else(|e| match e.kind() {
                io::ErrorKind::PermissionDenied => {
                    self.open_at(rel, OFlag::O_WRONLY | OFlag::O_NONBLOCK, Mode::empty())
                }
                _ => Err(e),
            })?;
        fchmod(&fd, Mode::from_bits_truncate(mode)).map_err(io::Error::from)
    }

    /// Removes the empty folder `rel`.
    pub fn remove_dir(&self, rel: impl AsRef<Path>) -> io::Result<()> {
        let (parent, name) = self.parent_of(rel.as_ref())?;
        unlinkat(parent.fd.as_fd(), name, UnlinkatFlags::RemoveDir).map_err(io::Error::from)
    }

    /// Removes the file (or link) `rel`; its folder is reached without following a link.
    pub fn remove_file(&self, rel: impl AsRef<Path>) -> io::Result<()> {
        let (parent, name) = self.parent_of(rel.as_ref())?;
        unlinkat(parent.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir).map_err(io::Error::from)
    }

    /// Writes `content` to a temporary file beside `rel` (whose folder must exist), to be
    /// renamed over it by [`Staged::commit`]. A file that exists keeps its permissions; a new
    /// one gets `0666` less the umask. Dropping the result removes the temporary file.
    pub fn stage(&self, rel: impl AsRef<Path>, content: &[u8]) -> io::Result<Staged> {
        let rel = plain(rel.as_ref())?;
        let (parent, name) = self.parent_of(&rel)?;
        let existing = match parent.metadata(name) {
            Ok(m) if m.is_file() => Some(m.permissions().mode() & 0o7777),
            Ok(m) if m.is_dir() => {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    format!("{} is a directory", rel.display()),
                ))
            }
            Ok(m) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}: {}", rel.display(), not_regular(&m)),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let (temp, fd) = loop {
            let mut temp = OsString::from(".");
            temp.push(name);
            temp.push(format!(
                ".{}-{}.penguin-tmp",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            match openat(
                parent.fd.as_fd(),
                temp.as_os_str(),
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o666),
            ) {
                Ok(fd) => break (temp, fd),
                // Left by a process that died, or planted: another name.
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let staged = Staged {
            parent,
            temp,
            name: name.to_owned(),
            done: false,
        };
        if let Some(mode) = existing {
            fchmod(&fd, Mode::from_bits_truncate(mode))?;
        }
        let mut file = File::from(fd);
        file.write_all(content)?;
        file.sync_all()?;
        Ok(staged)
    }

    /// Replaces (or creates) the file `rel` with `content` in one rename; its folder must
    /// exist.
    pub fn write(&self, rel: impl AsRef<Path>, content: &[u8]) -> io::Result<()> {
        let rel = rel.as_ref();
        if let Some(parent) = rel.parent() {
            self.create_dirs(parent)?;
        }
        self.stage(rel, content)?.commit()
    }

    /// Creates the new file `rel` (and its missing folders) to write, refusing one that
    /// exists (a planted link included).
    pub fn create_new(&self, rel: impl AsRef<Path>) -> io::Result<File> {
        let rel = rel.as_ref();
        if let Some(parent) = rel.parent() {
            self.create_dirs(parent)?;
        }
        let fd = self.open_at(
            rel,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            Mode::from_bits_truncate(0o644),
        )?;
        Ok(File::from(fd))
    }

    /// The handle, for code that opens beneath it itself.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A complete new content in its temporary file, waiting to be renamed into place.
#[derive(Debug)]
pub struct Staged {
    parent: Dir,
    temp: OsString,
    name: OsString,
    done: bool,
}

impl Staged {
    /// Renames the content over its target, within the folder's handle.
    pub fn commit(mut self) -> io::Result<()> {
        let (fd, temp, name) = (self.parent.fd.as_fd(), &self.temp, &self.name);
        nix::fcntl::renameat(fd, temp.as_os_str(), fd, name.as_os_str())
            .map_err(io::Error::from)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            let _ = unlinkat(
                self.parent.fd.as_fd(),
                self.temp.as_os_str(),
                UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}

/// `rel` as plain names only: an absolute path or `..` is refused (the caller's check
/// resolved those already; one here is a bug or an attack).
fn plain(rel: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for comp in rel.components() {
        match comp {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: not a plain path beneath its root (no `/` at the start, no `..`)",
                        rel.display()
                    ),
                ))
            }
        }
    }
    Ok(out)
}

fn rel_or_dot(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

/// Says in words why an open was refused where the errno alone would puzzle (`ELOOP`: a link
/// where the checked path had none; `EXDEV`: out of the root), for messages.
pub fn explain(e: &io::Error) -> Option<&'static str> {
    match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ELOOP) => Some(
            "a symbolic link is in the way (the folder changed while penguin used it, or the name is a link penguin does not follow here); refused rather than followed",
        ),
        Some(Errno::EXDEV) => Some("the path leads out of its root; refused"),
        _ => None,
    }
}

fn kind_of(meta: &Metadata) -> Kind {
    let t = meta.file_type();
    if t.is_file() {
        Kind::File
    } else if t.is_dir() {
        Kind::Dir
    } else if t.is_symlink() {
        Kind::Link
    } else {
        Kind::Other
    }
}

/// What a non-regular file is, in words.
pub fn not_regular(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory, not a file"
    } else if t.is_symlink() {
        "a symbolic link, which penguin does not follow here"
    } else if t.is_fifo() {
        "a FIFO (named pipe), not a regular file"
    } else if t.is_socket() {
        "a socket, not a regular file"
    } else if t.is_char_device() || t.is_block_device() {
        "a device, not a regular file"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(test: impl Fn()) {
        NO_OPENAT2.store(false, Ordering::Relaxed);
        test();
        NO_OPENAT2.store(true, Ordering::Relaxed);
        test();
        NO_OPENAT2.store(false, Ordering::Relaxed);
    }

    #[test]
    fn reads_and_writes_stay_beneath_and_follow_no_link() {
        both(|| {
            let tmp = tempfile::tempdir().unwrap();
            let outside = tempfile::tempdir().unwrap();
            std::fs::write(outside.path().join("secret"), "token").unwrap();
            let ws = Dir::open(tmp.path()).unwrap();
            ws.write("a/b/c.txt", b"x").unwrap();
            assert_eq!(ws.read("a/b/c.txt", 10).unwrap(), b"x");
            std::os::unix::fs::symlink(outside.path(), tmp.path().join("out")).unwrap();
            std::os::unix::fs::symlink("a", tmp.path().join("inner")).unwrap();
            let err = ws.read("out/secret", 100).unwrap_err();
            assert!(explain(&err).unwrap().contains("symbolic link"), "{err}");
            // Even a link that stays inside: the caller resolved links before; one now is
            // a change since.
            assert!(ws.read("inner/b/c.txt", 100).is_err());
            assert!(ws.write("out/new", b"y").is_err());
            assert!(ws.create_new("out/new").is_err());
            assert!(ws.create_dirs("out/sub").is_err());
            assert!(ws.remove_file("out/secret").is_err());
            assert!(ws.read("../x", 10).is_err());
            assert!(ws.read("/etc/passwd", 10).is_err());
            assert_eq!(
                std::fs::read_to_string(outside.path().join("secret")).unwrap(),
                "token"
            );
            assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
        });
    }

    #[test]
    fn a_link_as_the_target_is_replaced_never_written_through() {
        both(|| {
            let tmp = tempfile::tempdir().unwrap();
            let outside = tempfile::tempdir().unwrap();
            let victim = outside.path().join("victim");
            std::fs::write(&victim, "keep").unwrap();
            std::os::unix::fs::symlink(&victim, tmp.path().join("f")).unwrap();
            let ws = Dir::open(tmp.path()).unwrap();
            assert!(ws.read("f", 100).is_err());
            // `stage` sees the link and refuses it.
            assert!(ws.write("f", b"new").is_err());
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
            assert!(ws.create_new("f").is_err());
        });
    }

    #[test]
    fn special_files_are_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(&tmp.path().join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        let ws = Dir::open(tmp.path()).unwrap();
        let err = ws.read("fifo", 100).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
        assert!(ws.write("fifo", b"x").is_err());
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        assert!(ws
            .read("d", 100)
            .unwrap_err()
            .to_string()
            .contains("directory"));
    }

    #[test]
    fn writes_keep_permissions_and_leave_no_temporary() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Dir::open(tmp.path()).unwrap();
        ws.write("run.sh", b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            tmp.path().join("run.sh"),
            std::fs::Permissions::from_mode(0o751),
        )
        .unwrap();
        ws.write("run.sh", b"#!/bin/sh\ntrue\n").unwrap();
        let meta = std::fs::metadata(tmp.path().join("run.sh")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o751);
        let names: Vec<_> = ws.entries().unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec![OsString::from("run.sh")]);
        let staged = ws.stage("other", b"x").unwrap();
        assert_eq!(ws.entries().unwrap().len(), 2);
        drop(staged);
        assert_eq!(ws.entries().unwrap().len(), 1);
    }

    #[test]
    fn reads_are_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Dir::open(tmp.path()).unwrap();
        ws.write("big", &[b'a'; 100]).unwrap();
        let err = ws.read("big", 99).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(ws.read("big", 100).unwrap().len(), 100);
    }

    #[test]
    fn listings_name_links_as_links() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("f"), "").unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("l")).unwrap();
        let mut entries = Dir::open(tmp.path()).unwrap().entries().unwrap();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let kinds: Vec<_> = entries.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, vec![Kind::Dir, Kind::File, Kind::Link]);
    }
}
