//! Split invariance and clean truncation: how a body is chunked, or where it is cut off, must
//! never change what an adapter yields beyond what the bytes say.

use crate::translate::ToolCallIdAllocator;
use crate::wire::StreamDecoder;
use crate::LlmOutcome;

use super::{check_replay, lines_diff, replay, split_at, Replay};

/// Bodies up to this size are cut at every byte; larger ones at this many evenly spaced
/// points plus every point next to a line end or a non-ASCII byte.
const EXHAUSTIVE_UP_TO: usize = 4096;

/// Seeded random multi-cut splits per body.
const RANDOM_SPLITS: usize = 256;

/// The most cut points of one random split.
const MAX_CUTS: u64 = 24;

/// Asserts that `body` gives exactly the messages (timestamps aside) and the outcome of the
/// whole body however it is chunked: one byte at a time, cut at every single point (for a
/// large body, at every point near a line end or a non-ASCII byte and at evenly spaced
/// others), and at 256 seeded random sets of up to 24 points, empty chunks
/// included. Every replay is also held to [`check_replay`]. Panics naming `label`, the cut
/// points and the first difference.
pub fn assert_split_invariant<D: StreamDecoder>(decoder: impl Fn() -> D, body: &[u8], label: &str) {
    let observe = |chunks: &[&[u8]], cuts: &dyn Fn() -> String| {
        checked(&decoder, chunks, &|| format!("{label} split at {}", cuts())).observed()
    };
    let whole = observe(&[body], &|| "nothing".into());
    let compare = |chunks: &[&[u8]], cuts: &dyn Fn() -> String| {
        let got = observe(chunks, cuts);
        if got != whole {
            panic!(
                "{label}: split at {} gives another stream than the whole body\n{}",
                cuts(),
                first_difference(&whole, &got)
            );
        }
    };
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    compare(&bytes, &|| "every byte".into());
    for point in cut_points(body) {
        compare(&split_at(body, [point]), &|| format!("[{point}]"));
    }
    let mut rng = XorShift::new(seed(label));
    for _ in 0..RANDOM_SPLITS {
        let n = rng.below(MAX_CUTS + 1);
        let cuts: Vec<usize> = (0..n)
            .map(|_| rng.below(body.len() as u64 + 1) as usize)
            .collect();
        compare(&split_at(body, cuts.iter().copied()), &|| {
            let mut sorted = cuts.clone();
            sorted.sort_unstable();
            format!("{sorted:?} (set PENGUIN_TESTKIT_SEED to vary)")
        });
    }
}

/// Asserts that every prefix of `body` (a stream cut off anywhere: every point for a small
/// body, the points [`assert_split_invariant`] uses for a large one) still satisfies
/// [`check_replay`]: each segment it opened is closed, and `token_usage` comes only when the
/// prefix completed. Panics naming `label` and the cut.
pub fn assert_truncations_are_clean<D: StreamDecoder>(
    decoder: impl Fn() -> D,
    body: &[u8],
    label: &str,
) {
    for point in cut_points(body) {
        checked(&decoder, &[&body[..point]], &|| {
            format!("{label} cut off after {point} bytes")
        });
    }
}

/// [`replay`] checked with [`check_replay`], the label built only on failure.
fn checked<D: StreamDecoder>(
    decoder: &impl Fn() -> D,
    chunks: &[&[u8]],
    label: &dyn Fn() -> String,
) -> Replay {
    let (messages, outcome) = replay(decoder(), chunks, ToolCallIdAllocator::new());
    let replay = Replay { messages, outcome };
    if let Err(e) = check_replay(&replay) {
        panic!(
            "{}: {e}\n{:#?}\noutcome: {:?}",
            label(),
            replay.described(),
            replay.outcome
        );
    }
    replay
}

fn first_difference(whole: &(Vec<String>, LlmOutcome), got: &(Vec<String>, LlmOutcome)) -> String {
    if whole.0 != got.0 {
        // "Expected" is the whole body's stream.
        return lines_diff(&whole.0, &got.0);
    }
    format!("outcome:\n  whole: {:?}\n  split: {:?}", whole.1, got.1)
}

/// The single cut points tried for `body`, sorted: all of them for a small body.
fn cut_points(body: &[u8]) -> Vec<usize> {
    let len = body.len();
    if len <= EXHAUSTIVE_UP_TO {
        return (0..=len).collect();
    }
    let mut points: Vec<usize> = (0..EXHAUSTIVE_UP_TO)
        .map(|i| i * len / EXHAUSTIVE_UP_TO)
        .collect();
    for (i, &b) in body.iter().enumerate() {
        if b == b'\n' || b == b'\r' || !b.is_ascii() {
            points.extend([i, i + 1]);
        }
    }
    points.push(len);
    points.sort_unstable();
    points.dedup();
    points
}

/// The seed of `label`'s random splits: fixed per label (FNV-1a), varied by
/// `PENGUIN_TESTKIT_SEED`.
fn seed(label: &str) -> u64 {
    let base = label.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let extra = std::env::var("PENGUIN_TESTKIT_SEED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    base ^ extra
}

/// xorshift64*: small, deterministic, good enough to pick cut points.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::{ContentItem, UniEvent};
    use crate::wire::WireError;

    /// A broken decoder: it takes every chunk as whole text, so its output depends on how the
    /// body was chunked.
    #[derive(Debug, Default)]
    struct ChunkAsText;

    impl StreamDecoder for ChunkAsText {
        fn feed(&mut self, chunk: &[u8], out: &mut Vec<UniEvent>) -> Result<(), WireError> {
            out.push(UniEvent::item(ContentItem::Text {
                text: String::from_utf8_lossy(chunk).into_owned(),
                fidelity: None,
            }));
            Ok(())
        }

        fn finish(&mut self, _out: &mut Vec<UniEvent>) -> Result<(), WireError> {
            Ok(())
        }
    }

    #[test]
    #[should_panic(expected = "split at every byte gives another stream than the whole body")]
    fn a_decoder_that_depends_on_chunking_is_caught() {
        assert_split_invariant(ChunkAsText::default, b"ab", "chunky");
    }

    #[test]
    fn small_bodies_are_cut_everywhere_large_ones_near_line_ends() {
        assert_eq!(cut_points(b"ab\n"), [0, 1, 2, 3]);
        let mut big = vec![b'x'; 10_000];
        big[5001] = b'\n';
        let points = cut_points(&big);
        assert!(points.len() <= EXHAUSTIVE_UP_TO + 4, "{}", points.len());
        assert!(points.contains(&5001) && points.contains(&5002));
        assert_eq!((points[0], *points.last().unwrap()), (0, 10_000));
    }

    #[test]
    fn seeds_differ_by_label_and_the_generator_stays_in_range() {
        assert_ne!(seed("a.sse"), seed("b.sse"));
        let mut rng = XorShift::new(seed("x"));
        assert!((0..1000).all(|_| rng.below(7) < 7));
    }
}
