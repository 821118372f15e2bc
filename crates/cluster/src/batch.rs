//! Several records (or events) of one session in one JetStream message.
//!
//! JetStream 2.9's only per-subject condition (`Nats-Expected-Last-Subject-Sequence`) names the
//! stream sequence of the subject's previous message, which a writer learns only from that
//! message's acknowledgement: a second publish sent before the first is acknowledged could not
//! be fenced. So what queues while one publish is in flight goes out as the next publish, all
//! in one message: one conditional write, one acknowledgement, one quorum round trip for all
//! of them, and they are stored, or refused, together.
//!
//! A message carries its last item's number in `Penguin-Seq` and how many it holds in
//! `Penguin-Count` (absent: one); its payload is the items joined by newlines. An item that
//! holds a newline itself (never a JSON line) travels alone, so reading splits only messages
//! of more than one.

use async_nats::HeaderMap;
use bytes::{BufMut, Bytes, BytesMut};

/// The header counting the items of a message (absent: one).
pub(crate) const COUNT_HEADER: &str = "Penguin-Count";

/// Items in one message at most.
const MAX_ITEMS: usize = 256;

/// Bytes of items in one message at most: well under NATS's default payload limit (1 MiB),
/// and a delta burst of one answer fits many times over.
const MAX_BYTES: usize = 256 * 1024;

/// How many of `items`, from the first, go in one message: at least one, then each following
/// item that is `alike` the first while the message stays within its limits.
pub(crate) fn chunk_len<T>(
    items: &[T],
    bytes: impl Fn(&T) -> &[u8],
    alike: impl Fn(&T, &T) -> bool,
) -> usize {
    let Some(first) = items.first() else {
        return 0;
    };
    if !joinable(bytes(first)) {
        return 1;
    }
    let mut size = bytes(first).len();
    let mut n = 1;
    for item in &items[1..] {
        let b = bytes(item);
        if n == MAX_ITEMS || size + 1 + b.len() > MAX_BYTES || !joinable(b) || !alike(first, item) {
            break;
        }
        size += 1 + b.len();
        n += 1;
    }
    n
}

fn joinable(item: &[u8]) -> bool {
    !item.contains(&b'\n')
}

/// The payload of a message holding `items`.
pub(crate) fn join<'a>(items: impl IntoIterator<Item = &'a Bytes>) -> Bytes {
    let mut items = items.into_iter().peekable();
    let Some(first) = items.next() else {
        return Bytes::new();
    };
    if items.peek().is_none() {
        return first.clone();
    }
    let mut out = BytesMut::from(&first[..]);
    for item in items {
        out.put_u8(b'\n');
        out.put_slice(item);
    }
    out.freeze()
}

/// How many items a message holds, from its headers.
pub(crate) fn count_of(headers: Option<&HeaderMap>) -> Result<u64, String> {
    match headers.and_then(|h| h.get(COUNT_HEADER)) {
        None => Ok(1),
        Some(v) => match v.as_str().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!("{COUNT_HEADER} {:?}", v.as_str())),
        },
    }
}

/// The items of a message of `count` items.
pub(crate) fn split(payload: &Bytes, count: u64) -> Result<Vec<Bytes>, String> {
    if count == 1 {
        return Ok(vec![payload.clone()]);
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut start = 0;
    for (i, b) in payload.iter().enumerate() {
        if *b == b'\n' {
            out.push(payload.slice(start..i));
            start = i + 1;
        }
    }
    out.push(payload.slice(start..));
    if out.len() as u64 != count {
        return Err(format!(
            "{COUNT_HEADER} says {count} items, the payload holds {}",
            out.len()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn items_come_back_as_they_went() {
        let items = vec![b("{\"a\":1}"), b(""), b("{\"b\":\"x y\"}")];
        let payload = join(&items);
        assert_eq!(split(&payload, 3).unwrap(), items);
        assert_eq!(join(&items[..1]), items[0]);
        assert_eq!(split(&items[0], 1).unwrap(), vec![items[0].clone()]);
        assert!(split(&payload, 2).is_err());
    }

    #[test]
    fn a_message_holds_items_of_one_key_within_its_limits() {
        let items: Vec<(u8, Bytes)> = vec![
            (0, b("a")),
            (0, b("b")),
            (1, b("c")),
            (1, b("two\nlines")),
            (1, b("d")),
        ];
        let len = |from: usize| chunk_len(&items[from..], |i| &i.1[..], |a, b| a.0 == b.0);
        assert_eq!(len(0), 2, "a change of key ends a message");
        assert_eq!(len(2), 1, "an item with a newline is not joined");
        assert_eq!(len(3), 1, "an item with a newline travels alone");
        assert_eq!(len(4), 1);
        assert_eq!(chunk_len::<(u8, Bytes)>(&[], |i| &i.1[..], |_, _| true), 0);

        let many: Vec<Bytes> = (0..600).map(|_| b("x")).collect();
        assert_eq!(chunk_len(&many, |i| &i[..], |_, _| true), MAX_ITEMS);
        let big: Vec<Bytes> = (0..4)
            .map(|_| Bytes::from(vec![b'x'; MAX_BYTES / 3]))
            .collect();
        assert_eq!(chunk_len(&big, |i| &i[..], |_, _| true), 2);
        let huge = vec![Bytes::from(vec![b'x'; MAX_BYTES * 2])];
        assert_eq!(
            chunk_len(&huge, |i| &i[..], |_, _| true),
            1,
            "alone, whatever its size"
        );
    }

    #[test]
    fn the_count_header_is_checked() {
        assert_eq!(count_of(None), Ok(1));
        let mut h = HeaderMap::new();
        h.insert(COUNT_HEADER, "7");
        assert_eq!(count_of(Some(&h)), Ok(7));
        h.insert(COUNT_HEADER, "0");
        assert!(count_of(Some(&h)).is_err());
    }
}
