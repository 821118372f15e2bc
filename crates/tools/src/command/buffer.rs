//! Text plumbing of a command's output: UTF-8 decoding across chunk boundaries, and a capped
//! buffer of what nobody has read yet.

/// Decodes a byte stream as UTF-8 across chunk boundaries; invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub(crate) struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub(crate) fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            // An incomplete sequence at the end: wait for the next chunk.
                            self.pending.drain(..valid);
                            return out;
                        }
                    }
                }
            }
        }
    }

    pub(crate) fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

/// Unread text, at most `cap` bytes: the newest is kept, and the next read says how much of
/// the oldest was dropped.
#[derive(Debug)]
pub struct CappedText {
    text: String,
    dropped: usize,
    cap: usize,
    label: &'static str,
}

impl CappedText {
    /// `label` names what is dropped, e.g. `earlier output`.
    pub fn new(cap: usize, label: &'static str) -> CappedText {
        CappedText {
            text: String::new(),
            dropped: 0,
            cap,
            label,
        }
    }

    /// Appends, dropping the oldest beyond the cap.
    pub fn push(&mut self, chunk: &str) {
        self.text.push_str(chunk);
        if self.text.len() > self.cap {
            let mut cut = self.text.len() - self.cap;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.dropped += cut;
            self.text.drain(..cut);
        }
    }

    /// Whether nothing is unread (dropped text counts: its marker is still owed).
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.dropped == 0
    }

    /// Takes everything unread, led by a drop marker when the cap cut something.
    pub fn drain(&mut self) -> String {
        let text = std::mem::take(&mut self.text);
        if self.dropped == 0 {
            return text;
        }
        let n = std::mem::take(&mut self.dropped);
        format!("[... {n} bytes of {} dropped ...]\n{text}", self.label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_is_decoded_across_chunk_boundaries() {
        let bytes = "héllo €".as_bytes();
        let mut dec = Utf8Stream::default();
        let mut text = String::new();
        for b in bytes {
            text.push_str(&dec.push(std::slice::from_ref(b)));
        }
        text.push_str(&dec.finish());
        assert_eq!(text, "héllo €");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut dec = Utf8Stream::default();
        let mut text = dec.push(b"a\xffb\xe2\x82");
        text.push_str(&dec.finish());
        assert_eq!(text, "a\u{fffd}b\u{fffd}");
    }

    #[test]
    fn the_capped_buffer_keeps_the_newest_and_says_what_it_dropped() {
        let mut b = CappedText::new(4, "earlier output");
        b.push("ab");
        b.push("cdéf");
        assert_eq!(
            b.drain(),
            "[... 3 bytes of earlier output dropped ...]\ndéf"
        );
        assert_eq!(b.drain(), "");
        b.push("xy");
        assert_eq!(b.drain(), "xy");
    }
}
