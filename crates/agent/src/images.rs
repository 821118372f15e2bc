//! Images for a model without vision (`[models.x] vision = false`): the one place they are
//! folded into text.
//!
//! A model configured without vision never receives an image part. [`TextOnly`] wraps its
//! [`Llm`] (the facade's [`build_llm`](crate::models::build_llm) does it for every model of such
//! a spec, the compaction and rebuilt ones included) and folds each request's messages and a
//! resumed history before the adapter sees them:
//!
//! - an input image (`image_url` as a `data:` URL, or `inline_data` of an `image/*` type) is
//!   saved in the workspace as `.penguin/images/<hash>.<ext>` (named by its content, so the
//!   same image is one file however often it is sent) and becomes the user text
//!   `[attached image: .penguin/images/<hash>.png]` in its place;
//! - an image by `http(s)` URL becomes `[attached image: <url>]`;
//! - the images of a tool's output (`read_image`, an MCP tool) are saved alike and their lines
//!   appended to the output text;
//! - an image that is not a base64 `data:` URL becomes
//!   `[an attached image could not be saved and was dropped]`.
//!
//! The stream and the Trace keep the images as they were given (a person sees what they
//! attached; a later model with vision can read them); only the request changes. A file that
//! cannot be written fails the request permanently, naming the path: carrying on without what
//! the person attached would mislead the model.

use std::io;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use base64::Engine as _;
use penguin_llm_providers::{Llm, LlmOutcome, LlmRequest, MessageSink};
use penguin_omni_protocol::{
    build, markers, Body, ModelPayload, OmniMessage, Role, StopReason, TokenCounts,
};
use penguin_tools::confined::Dir;

/// Where the images of a model without vision are saved, relative to the workspace.
pub const IMAGE_DIR: &str = ".penguin/images";

/// Stands in for an image that is neither a `data:` URL nor an `http(s)` one.
pub const IMAGE_DROPPED: &str = "[an attached image could not be saved and was dropped]";

/// Folds images into path lines for one workspace.
#[derive(Clone, Debug)]
pub struct ImageFold {
    workspace: PathBuf,
}

impl ImageFold {
    /// A fold saving images under `workspace`/[`IMAGE_DIR`].
    pub fn new(workspace: impl Into<PathBuf>) -> ImageFold {
        ImageFold {
            workspace: workspace.into(),
        }
    }

    /// `messages` with every image folded into text (see the module docs). Messages without
    /// images are returned as they are.
    pub fn fold(&self, messages: &[OmniMessage]) -> io::Result<Vec<OmniMessage>> {
        messages.iter().map(|m| self.fold_one(m)).collect()
    }

    fn fold_one(&self, message: &OmniMessage) -> io::Result<OmniMessage> {
        Ok(match message.model() {
            Some(ModelPayload::ImageUrl(i)) => build::user_text(self.line(&i.image_url)?),
            Some(ModelPayload::InlineData(d))
                if d.role == Role::User && d.mime_type.starts_with("image/") =>
            {
                build::user_text(self.saved_line(&d.mime_type, &d.data)?)
            }
            Some(ModelPayload::ToolCallOutput(o))
                if o.images.as_ref().is_some_and(|i| !i.is_empty()) =>
            {
                let mut o = o.clone();
                let mut lines = Vec::new();
                for url in o.images.take().into_iter().flatten() {
                    lines.push(self.line(&url)?);
                }
                if !o.output.is_empty() {
                    o.output.push_str("\n\n");
                }
                o.output.push_str(&lines.join("\n"));
                OmniMessage::new(Body::Model(ModelPayload::ToolCallOutput(o)))
            }
            _ => message.clone(),
        })
    }

    /// The line naming one image by URL.
    fn line(&self, url: &str) -> io::Result<String> {
        let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            return Ok(markers::attached_image_line(url));
        }
        match url
            .strip_prefix("data:")
            .and_then(|r| r.split_once(";base64,"))
        {
            Some((mime, data)) => self.saved_line(mime, data),
            None => Ok(IMAGE_DROPPED.to_owned()),
        }
    }

    /// Saves base64 `data` and names it; undecodable data is dropped with the note.
    fn saved_line(&self, mime: &str, data: &str) -> io::Result<String> {
        let cleaned: String = data.chars().filter(|c| !c.is_whitespace()).collect();
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(cleaned) else {
            return Ok(IMAGE_DROPPED.to_owned());
        };
        let path = self.save(mime, &bytes)?;
        Ok(markers::attached_image_line(&path))
    }

    /// Writes `bytes` as `IMAGE_DIR/<hash>.<ext>` (or beside a different file of the same
    /// name, `<hash>-N.<ext>`) and returns that path, relative to the workspace.
    ///
    /// Everything goes through the workspace's door (`penguin_tools::confined`): the names
    /// are predictable, so a command may have planted a link at `.penguin`, at the folder or
    /// at the file; none is followed (a link at a file's name just takes that name).
    fn save(&self, mime: &str, bytes: &[u8]) -> io::Result<String> {
        let ws = Dir::open(&self.workspace).map_err(|e| at(&self.workspace, e))?;
        let ext = extension(mime);
        let hash = format!("{:016x}", fnv1a(bytes));
        penguin_tools::workspace_dir::create_dirs(&ws, Path::new(IMAGE_DIR))
            .map_err(|e| at(&self.workspace.join(IMAGE_DIR), e))?;
        for n in 0u32.. {
            let name = match n {
                0 => format!("{hash}.{ext}"),
                n => format!("{hash}-{n}.{ext}"),
            };
            let rel = format!("{IMAGE_DIR}/{name}");
            match ws.read(&rel, bytes.len() as u64) {
                Ok(existing) if existing == bytes => return Ok(rel),
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                // Longer, a link, a FIFO: another file holds the name.
                Err(_) => continue,
            }
            match ws.create_new(&rel) {
                Ok(mut file) => {
                    io::Write::write_all(&mut file, bytes)
                        .map_err(|e| at(&self.workspace.join(&rel), e))?;
                    return Ok(rel);
                }
                // Made since we looked (another save of the same image, or a planted link).
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(at(&self.workspace.join(&rel), e)),
            }
        }
        unreachable!("some name is free")
    }
}

fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The file extension of an image type (`bin` for one not known: `read_image` and other
/// readers go by the bytes, not the name).
fn extension(mime: &str) -> &'static str {
    match mime.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/bmp" => "bmp",
        "image/svg+xml" => "svg",
        _ => "bin",
    }
}

/// 64-bit FNV-1a: a stable name for an image's bytes (a clash is handled by `save`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The model of a spec without vision: every request and a resumed history pass through an
/// [`ImageFold`] first.
#[derive(Debug)]
pub struct TextOnly {
    inner: Box<dyn Llm>,
    fold: ImageFold,
}

impl TextOnly {
    /// Wraps `inner`, saving images under `workspace`.
    pub fn new(inner: Box<dyn Llm>, workspace: impl Into<PathBuf>) -> TextOnly {
        TextOnly {
            inner,
            fold: ImageFold::new(workspace),
        }
    }
}

#[async_trait]
impl Llm for TextOnly {
    async fn stream_generate(
        &mut self,
        mut request: LlmRequest,
        sink: &mut dyn MessageSink,
    ) -> LlmOutcome {
        match self.fold.fold(&request.new_messages) {
            Ok(folded) => request.new_messages = folded,
            Err(e) => {
                return LlmOutcome {
                    status: StopReason::Failed,
                    error_message: Some(format!(
                        "cannot save an attached image for a model without vision: {e}"
                    )),
                    permanent: true,
                }
            }
        }
        self.inner.stream_generate(request, sink).await
    }

    fn session_tokens(&self) -> TokenCounts {
        self.inner.session_tokens()
    }

    fn set_history(&mut self, history: &[OmniMessage]) {
        match self.fold.fold(history) {
            Ok(folded) => self.inner.set_history(&folded),
            Err(e) => {
                tracing::warn!(
                    "resumed history: cannot save an image for a model without vision: {e}"
                );
                let dropped: Vec<OmniMessage> = history
                    .iter()
                    .map(|m| match m.model() {
                        Some(ModelPayload::ImageUrl(_) | ModelPayload::InlineData(_)) => {
                            build::user_text(IMAGE_DROPPED)
                        }
                        _ => m.clone(),
                    })
                    .collect();
                self.inner.set_history(&dropped);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

    fn text_of(m: &OmniMessage) -> String {
        match m.model() {
            Some(ModelPayload::Text(t)) => t.text.clone(),
            Some(ModelPayload::ToolCallOutput(o)) => o.output.clone(),
            other => panic!("not a text: {other:?}"),
        }
    }

    #[test]
    fn an_input_image_is_saved_by_its_content_and_named_in_its_place() {
        let ws = tempfile::tempdir().unwrap();
        let fold = ImageFold::new(ws.path());
        let input = [
            build::user_text("what is this?"),
            build::image_url(PNG),
            build::image_url(PNG),
        ];
        let out = fold.fold(&input).unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(text_of(&out[0]), "what is this?");
        let line = text_of(&out[1]);
        let path = line
            .strip_prefix("[attached image: ")
            .and_then(|l| l.strip_suffix(']'))
            .unwrap();
        assert!(
            path.starts_with(".penguin/images/") && path.ends_with(".png"),
            "{line}"
        );
        assert_eq!(text_of(&out[2]), line, "the same image is the same file");
        let saved = std::fs::read(ws.path().join(path)).unwrap();
        assert!(saved.starts_with(b"\x89PNG"));
        assert_eq!(
            std::fs::read_dir(ws.path().join(IMAGE_DIR))
                .unwrap()
                .count(),
            1
        );
    }

    #[test]
    fn urls_are_named_and_unreadable_images_dropped() {
        let ws = tempfile::tempdir().unwrap();
        let fold = ImageFold::new(ws.path());
        let out = fold
            .fold(&[
                build::image_url("https://example.com/a.png"),
                build::image_url("data:image/png;base64,@@@"),
                build::image_url("file:///etc/passwd"),
            ])
            .unwrap();
        assert_eq!(
            text_of(&out[0]),
            "[attached image: https://example.com/a.png]"
        );
        assert_eq!(text_of(&out[1]), IMAGE_DROPPED);
        assert_eq!(text_of(&out[2]), IMAGE_DROPPED);
        assert!(!ws.path().join(IMAGE_DIR).exists());
    }

    #[test]
    fn a_tool_outputs_images_become_lines_after_its_text() {
        let ws = tempfile::tempdir().unwrap();
        let fold = ImageFold::new(ws.path());
        let output = build::tool_call_output_with_images(
            "Image shot.png: PNG",
            "c1",
            StopReason::Completed,
            vec![PNG.into()],
        );
        let out = fold.fold(&[output]).unwrap();
        let Some(ModelPayload::ToolCallOutput(o)) = out[0].model() else {
            panic!()
        };
        assert_eq!(o.images, None);
        assert_eq!(o.tool_call_id, "c1");
        assert!(
            o.output
                .starts_with("Image shot.png: PNG\n\n[attached image: .penguin/images/"),
            "{}",
            o.output
        );
    }

    #[test]
    fn planted_links_are_never_written_through() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let fold = ImageFold::new(ws.path());
        // The name is a content hash anyone can compute: a dangling link planted there.
        let first = fold.fold(&[build::image_url(PNG)]).unwrap();
        let path = text_of(&first[0])
            .strip_prefix("[attached image: ")
            .and_then(|l| l.strip_suffix(']'))
            .unwrap()
            .to_owned();
        std::fs::remove_file(ws.path().join(&path)).unwrap();
        std::os::unix::fs::symlink(outside.path().join("planted"), ws.path().join(&path)).unwrap();
        let again = fold.fold(&[build::image_url(PNG)]).unwrap();
        assert!(
            !text_of(&again[0]).contains(&path),
            "{}",
            text_of(&again[0])
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // `.penguin` itself a link out of the workspace.
        std::fs::remove_dir_all(ws.path().join(".penguin")).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join(".penguin")).unwrap();
        assert!(fold.fold(&[build::image_url(PNG)]).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_unwritable_workspace_fails_the_fold() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join(".penguin"), "a file").unwrap();
        let err = ImageFold::new(ws.path())
            .fold(&[build::image_url(PNG)])
            .unwrap_err();
        assert!(err.to_string().contains(".penguin"), "{err}");
    }
}
