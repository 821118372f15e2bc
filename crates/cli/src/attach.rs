//! Images attached to a prompt: `--image FILE` (run, resume, chat's first message) and an
//! `@path.png` mention of an image file of the workspace. Each becomes an `image_url` part (a
//! `data:` URL) after the prompt's text, the shape the server's API takes; a model without
//! vision gets them folded into paths by the facade (`penguin::images`).

use std::path::{Path, PathBuf};

use penguin::omni_protocol::{build, OmniMessage};

/// The largest image attached (as `read_image` reads).
const MAX_IMAGE_BYTES: u64 = 10 << 20;

/// The extensions an `@` mention must end with to be read as an image.
const IMAGE_EXTENSIONS: [&str; 5] = ["png", "jpg", "jpeg", "gif", "webp"];

/// One attached image: its part and what is said of it.
#[derive(Debug)]
pub(crate) struct Attached {
    pub(crate) part: OmniMessage,
    /// `shot.png (PNG, 12.3 KiB)`.
    pub(crate) label: String,
}

/// The image at `path`, or why it cannot be attached (`shown` names it in the message).
pub(crate) fn image(path: &Path, shown: &str) -> Result<Attached, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {}", io_reason(&e)))?;
    if meta.is_dir() {
        return Err(format!("{shown}: a directory, not an image"));
    }
    if meta.len() > MAX_IMAGE_BYTES {
        return Err(format!(
            "{shown}: {} is larger than images may be ({})",
            human(meta.len()),
            human(MAX_IMAGE_BYTES)
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{shown}: {}", io_reason(&e)))?;
    let Some((name, mime)) = format_of(&bytes) else {
        return Err(format!(
            "{shown}: not a PNG, JPEG, GIF or WebP image (by its first bytes)"
        ));
    };
    use base64::Engine as _;
    let url = format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&bytes)
    );
    Ok(Attached {
        part: build::image_url(url),
        label: format!("{shown} ({name}, {})", human(bytes.len() as u64)),
    })
}

/// The `--image` files, read now so a wrong one is said before anything runs.
pub(crate) fn files(paths: &[PathBuf]) -> Result<Vec<Attached>, String> {
    paths
        .iter()
        .map(|p| image(p, &p.display().to_string()).map_err(|e| format!("--image {e}")))
        .collect()
}

/// The images an input line mentions as `@path` (relative to the workspace, or absolute
/// inside it) with an image extension, each once, in order; and a note for each mention that
/// names no readable image of the workspace (the line is still sent as typed).
pub(crate) fn mentions(line: &str, workspace: &Path) -> (Vec<Attached>, Vec<String>) {
    let mut found = Vec::new();
    let mut notes = Vec::new();
    let mut seen = Vec::new();
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    for word in line.split_whitespace() {
        let Some(mention) = word.strip_prefix('@') else {
            continue;
        };
        let mention = mention.trim_end_matches([',', '.', ';', ':', '!', '?', ')', '"', '\'']);
        let is_image = Path::new(mention)
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
        if !is_image || seen.iter().any(|s| s == mention) {
            continue;
        }
        seen.push(mention.to_owned());
        let shown = format!("@{mention}");
        let path = std::fs::canonicalize(root.join(mention));
        match path {
            Ok(path) if path.starts_with(&root) => match image(&path, &shown) {
                Ok(a) => found.push(a),
                Err(e) => notes.push(format!("{e}: not attached")),
            },
            Ok(_) => notes.push(format!("{shown}: outside the workspace: not attached")),
            Err(e) => notes.push(format!("{shown}: {}: not attached", io_reason(&e))),
        }
    }
    (found, notes)
}

/// A prompt's input: its text, then its images.
pub(crate) fn input(text: String, images: Vec<Attached>) -> Vec<OmniMessage> {
    std::iter::once(build::user_text(text))
        .chain(images.into_iter().map(|a| a.part))
        .collect()
}

/// What is said of attached images (on stderr, before the task).
pub(crate) fn said(images: &[Attached]) -> Option<String> {
    (!images.is_empty()).then(|| {
        let labels: Vec<&str> = images.iter().map(|a| a.label.as_str()).collect();
        format!("attached: {}", labels.join(", "))
    })
}

fn format_of(bytes: &[u8]) -> Option<(&'static str, &'static str)> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(("PNG", "image/png"))
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some(("JPEG", "image/jpeg"))
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some(("GIF", "image/gif"))
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some(("WebP", "image/webp"))
    } else {
        None
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin::omni_protocol::ModelPayload;

    const PNG: &[u8] =
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";

    fn url(a: &Attached) -> &str {
        match a.part.model() {
            Some(ModelPayload::ImageUrl(i)) => &i.image_url,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_image_becomes_a_data_url_part_and_other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.png"), PNG).unwrap();
        std::fs::write(dir.path().join("notes.png"), "text").unwrap();
        let a = image(&dir.path().join("a.png"), "a.png").unwrap();
        assert!(url(&a).starts_with("data:image/png;base64,iVBORw0KGgo"));
        assert_eq!(a.label, "a.png (PNG, 33 B)");
        assert_eq!(
            image(&dir.path().join("notes.png"), "notes.png").unwrap_err(),
            "notes.png: not a PNG, JPEG, GIF or WebP image (by its first bytes)"
        );
        assert_eq!(
            image(&dir.path().join("gone.png"), "gone.png").unwrap_err(),
            "gone.png: no such file"
        );
    }

    #[test]
    fn mentions_of_workspace_images_attach_them_once() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        std::fs::create_dir_all(ws.join("shots")).unwrap();
        std::fs::write(ws.join("shots/a.png"), PNG).unwrap();
        std::fs::write(root.path().join("secret.png"), PNG).unwrap();
        let (found, notes) = mentions(
            "compare @shots/a.png, @shots/a.png and @missing.jpg with @../secret.png; mail @bob or @notes.txt",
            &ws,
        );
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].label, "@shots/a.png (PNG, 33 B)");
        assert_eq!(
            notes,
            [
                "@missing.jpg: no such file: not attached",
                "@../secret.png: outside the workspace: not attached"
            ]
        );
    }

    #[test]
    fn the_input_is_the_text_then_the_images() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.png"), PNG).unwrap();
        let images = files(&[dir.path().join("a.png")]).unwrap();
        assert!(said(&images).unwrap().starts_with("attached: "));
        let input = input("what is it?".into(), images);
        assert_eq!(input.len(), 2);
        assert_eq!(input[1].payload_type(), "image_url");
        assert!(files(&[dir.path().join("b.png")])
            .unwrap_err()
            .starts_with("--image "));
    }
}
