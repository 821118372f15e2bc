//! `read_image`: a PNG, JPEG, GIF or WebP file of the workspace handed to the model as an
//! image (a `data:` URL on the call's output), with a line saying what it is: format,
//! dimensions read from its header, size.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;

use crate::files::{describe, hints, sniff};
use crate::fs_tool::{parse, size, Answer, FsCtx};

/// The largest image read.
pub(crate) const MAX_IMAGE_BYTES: u64 = 10 << 20;

#[derive(Deserialize)]
struct ImageArgs {
    path: String,
}

/// An image format read_image takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Png,
    Jpeg,
    Gif,
    WebP,
}

impl Format {
    fn of(bytes: &[u8]) -> Option<Format> {
        match sniff::magic(bytes)? {
            "PNG image" => Some(Format::Png),
            "JPEG image" => Some(Format::Jpeg),
            "GIF image" => Some(Format::Gif),
            "WebP image" => Some(Format::WebP),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Png => "PNG",
            Format::Jpeg => "JPEG",
            Format::Gif => "GIF",
            Format::WebP => "WebP",
        }
    }

    fn mime(self) -> &'static str {
        match self {
            Format::Png => "image/png",
            Format::Jpeg => "image/jpeg",
            Format::Gif => "image/gif",
            Format::WebP => "image/webp",
        }
    }
}

/// `read_image {path}`.
pub(crate) fn read_image(ctx: &FsCtx, args: Value) -> Result<Answer, String> {
    let args: ImageArgs = parse(args, "read_image")?;
    let full = ctx.workspace.resolve(&args.path)?;
    let shown = ctx.display(&full);
    let (dir, rel) = ctx
        .workspace
        .door(&full)
        .map_err(|e| describe(&shown, &e))?;
    let meta = dir.metadata(&rel).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => hints::missing(ctx, &args.path, &full),
        _ => describe(&shown, &e),
    })?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a file"));
    }
    if meta.len() > MAX_IMAGE_BYTES {
        return Err(format!(
            "{shown} is {}, more than the {} read_image takes",
            size(meta.len()),
            size(MAX_IMAGE_BYTES)
        ));
    }
    // Checked again on the descriptor: the name may be another file by now.
    let bytes = dir
        .read(&rel, MAX_IMAGE_BYTES)
        .map_err(|e| describe(&shown, &e))?;
    let Some(format) = Format::of(&bytes) else {
        let what = match sniff::binary(&bytes) {
            Some(what) => format!("binary data ({what})"),
            None => "text, which read_file reads".to_owned(),
        };
        return Err(format!(
            "{shown} is not a PNG, JPEG, GIF or WebP image (the formats read_image shows) but {what}"
        ));
    };
    let (width, height) = dimensions(format, &bytes).ok_or_else(|| {
        format!(
            "{shown} starts like a {} image but its header is cut short or damaged",
            format.name()
        )
    })?;
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    Ok(Answer {
        text: format!(
            "Image {shown}: {}, {width}×{height} pixels, {} (attached to this result)",
            format.name(),
            size(bytes.len() as u64)
        ),
        images: vec![format!("data:{};base64,{data}", format.mime())],
    })
}

/// Width and height from the format's header.
fn dimensions(format: Format, b: &[u8]) -> Option<(u32, u32)> {
    let be16 = |at: usize| {
        Some(u32::from(u16::from_be_bytes([
            *b.get(at)?,
            *b.get(at + 1)?,
        ])))
    };
    let le16 = |at: usize| {
        Some(u32::from(u16::from_le_bytes([
            *b.get(at)?,
            *b.get(at + 1)?,
        ])))
    };
    let le24 = |at: usize| {
        Some(u32::from_le_bytes([
            *b.get(at)?,
            *b.get(at + 1)?,
            *b.get(at + 2)?,
            0,
        ]))
    };
    match format {
        Format::Png if b.get(12..16) == Some(b"IHDR") => {
            let be32 = |at: usize| Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?));
            Some((be32(16)?, be32(20)?))
        }
        Format::Png => None,
        Format::Gif => Some((le16(6)?, le16(8)?)),
        Format::WebP => match b.get(12..16)? {
            b"VP8 " => Some((le16(26)? & 0x3fff, le16(28)? & 0x3fff)),
            b"VP8L" => {
                let bits = u32::from_le_bytes(b.get(21..25)?.try_into().ok()?);
                Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
            }
            b"VP8X" => Some((le24(24)? + 1, le24(27)? + 1)),
            _ => None,
        },
        Format::Jpeg => {
            // Walk the marker segments to the frame header (SOF0..SOF15 but DHT, JPG, DAC).
            let mut at = 2;
            loop {
                while *b.get(at)? == 0xff && *b.get(at + 1)? == 0xff {
                    at += 1;
                }
                if *b.get(at)? != 0xff {
                    return None;
                }
                let marker = *b.get(at + 1)?;
                let standalone = matches!(marker, 0x01 | 0xd0..=0xd8);
                if standalone {
                    at += 2;
                    continue;
                }
                if (0xc0..=0xcf).contains(&marker) && ![0xc4, 0xc8, 0xcc].contains(&marker) {
                    return Some((be16(at + 7)?, be16(at + 5)?));
                }
                at += 2 + usize::try_from(be16(at + 2)?).ok()?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimensions_come_from_each_header() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend([0, 0, 2, 128, 0, 0, 1, 224]);
        assert_eq!(dimensions(Format::Png, &png), Some((640, 480)));
        let gif = b"GIF89a\x40\x01\xf0\x00";
        assert_eq!(dimensions(Format::Gif, gif), Some((320, 240)));
        // SOI, an APP0 segment of 4 bytes, then SOF0: precision 8, height 2, width 3.
        let jpeg = b"\xff\xd8\xff\xe0\x00\x04ab\xff\xc0\x00\x11\x08\x00\x02\x00\x03";
        assert_eq!(dimensions(Format::Jpeg, jpeg), Some((3, 2)));
        let mut webp = b"RIFF\0\0\0\0WEBPVP8X\0\0\0\0\0\0\0\0".to_vec();
        webp.extend([99, 0, 0, 49, 0, 0]);
        assert_eq!(dimensions(Format::WebP, &webp), Some((100, 50)));
        assert_eq!(dimensions(Format::Jpeg, b"\xff\xd8\xff"), None);
    }
}
