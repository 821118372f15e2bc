//! What a file holds when it is not text: its format from the magic bytes it starts with, or
//! the first byte that makes it binary.

use crate::fs_tool::size;

/// The formats recognised by their first bytes, as `(magic, offset, name)`.
const MAGIC: &[(&[u8], usize, &str)] = &[
    (b"\x89PNG\r\n\x1a\n", 0, "PNG image"),
    (b"\xff\xd8\xff", 0, "JPEG image"),
    (b"GIF87a", 0, "GIF image"),
    (b"GIF89a", 0, "GIF image"),
    (b"WEBP", 8, "WebP image"),
    (b"%PDF-", 0, "PDF document"),
    (
        b"PK\x03\x04",
        0,
        "ZIP archive (or a format built on ZIP: jar, docx, xlsx, …)",
    ),
    (b"PK\x05\x06", 0, "ZIP archive (empty)"),
    (b"\x7fELF", 0, "ELF executable or library"),
    (b"\x1f\x8b", 0, "gzip-compressed data"),
    (b"\0asm", 0, "WebAssembly module"),
];

/// The format `bytes` start with, if one is known.
pub(crate) fn magic(bytes: &[u8]) -> Option<&'static str> {
    MAGIC.iter().find_map(|(magic, at, name)| {
        let riff = *at == 0 || bytes.starts_with(b"RIFF");
        (riff && bytes.get(*at..at + magic.len()) == Some(*magic)).then_some(*name)
    })
}

/// Why `bytes` are not UTF-8 text, or `None` when they are.
pub(crate) fn binary(bytes: &[u8]) -> Option<String> {
    if let Some(name) = magic(bytes) {
        return Some(name.to_owned());
    }
    if let Some(at) = bytes.iter().position(|b| *b == 0) {
        return Some(format!("NUL bytes, the first at byte {at}"));
    }
    std::str::from_utf8(bytes).err().map(|e| {
        let at = e.valid_up_to();
        format!("not UTF-8: byte 0x{:02x} at offset {at}", bytes[at])
    })
}

/// The error a text tool answers for a binary file.
pub(crate) fn refusal(shown: &str, what: &str, len: usize) -> String {
    let mut text = format!(
        "{shown} is a binary file ({what}; {}); only UTF-8 text can be read or edited",
        size(len as u64)
    );
    if what.ends_with(" image") {
        text.push_str(", use read_image to look at it");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_named_by_their_magic() {
        assert_eq!(magic(b"\x89PNG\r\n\x1a\nrest"), Some("PNG image"));
        assert_eq!(magic(b"RIFF\0\0\0\0WEBPVP8 "), Some("WebP image"));
        assert_eq!(magic(b"XXXX\0\0\0\0WEBP"), None);
        assert_eq!(magic(b"%PDF-1.7"), Some("PDF document"));
        assert_eq!(magic(b"plain"), None);
        assert_eq!(binary(b"plain text\n"), None);
        assert_eq!(binary(b"ab\0c").unwrap(), "NUL bytes, the first at byte 2");
        assert_eq!(
            binary(b"ab\xffc").unwrap(),
            "not UTF-8: byte 0xff at offset 2"
        );
    }
}
