//! Envelope timestamps: UTC, millisecond precision, ending in `Z` (JavaScript's `toISOString`).

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An envelope timestamp.
///
/// Kept as the exact string that was built or parsed, so a message read from a trace serializes
/// back to the same bytes. Built timestamps are always `YYYY-MM-DDTHH:MM:SS.mmmZ`, held inline
/// (every message has one: no allocation for it).
#[derive(Clone)]
pub struct Timestamp(Repr);

#[derive(Clone)]
enum Repr {
    /// The canonical 24 ASCII bytes.
    Canonical([u8; 24]),
    /// Anything else read from a file, kept as it was.
    Other(Box<str>),
}

impl PartialEq for Timestamp {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Timestamp {}

impl std::hash::Hash for Timestamp {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for Timestamp {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timestamp {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

fn digits(out: &mut [u8], mut n: i64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Timestamp {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        // Messages come thousands to a millisecond: the calendar is worked out once per one.
        thread_local! {
            static LAST: std::cell::Cell<Option<(i64, [u8; 24])>> = const { std::cell::Cell::new(None) };
        }
        LAST.with(|last| match last.get() {
            Some((at, bytes)) if at == ms => Timestamp(Repr::Canonical(bytes)),
            _ => {
                let t = Timestamp::from_unix_millis(ms);
                if let Repr::Canonical(bytes) = t.0 {
                    last.set(Some((ms, bytes)));
                }
                t
            }
        })
    }

    /// The timestamp for `ms` milliseconds after the Unix epoch.
    ///
    /// ```
    /// use penguin_omni_protocol::Timestamp;
    /// assert_eq!(Timestamp::from_unix_millis(0).as_str(), "1970-01-01T00:00:00.000Z");
    /// assert_eq!(Timestamp::from_unix_millis(1_784_344_222_531).as_str(), "2026-07-18T03:10:22.531Z");
    /// ```
    pub fn from_unix_millis(ms: i64) -> Timestamp {
        let days = ms.div_euclid(86_400_000);
        let rem = ms.rem_euclid(86_400_000);
        let (y, m, d) = civil_from_days(days);
        let (h, min, s, milli) = (
            rem / 3_600_000,
            rem / 60_000 % 60,
            rem / 1000 % 60,
            rem % 1000,
        );
        if !(0..=9999).contains(&y) {
            // Outside what four digits hold: the general (allocating) path.
            return Timestamp(Repr::Other(
                format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z").into(),
            ));
        }
        let mut b = *b"0000-00-00T00:00:00.000Z";
        digits(&mut b[0..4], y);
        digits(&mut b[5..7], m);
        digits(&mut b[8..10], d);
        digits(&mut b[11..13], h);
        digits(&mut b[14..16], min);
        digits(&mut b[17..19], s);
        digits(&mut b[20..23], milli);
        Timestamp(Repr::Canonical(b))
    }

    /// [`Timestamp::from_string`] without taking a `String`: the usual 24-byte timestamp is
    /// kept inline, allocation-free.
    pub fn from_text(s: &str) -> Timestamp {
        match <[u8; 24]>::try_from(s.as_bytes()) {
            Ok(b) => Timestamp(Repr::Canonical(b)),
            Err(_) => Timestamp(Repr::Other(s.into())),
        }
    }

    /// Wraps a string as a timestamp without checking its shape.
    pub fn from_string(s: String) -> Timestamp {
        match <[u8; 24]>::try_from(s.as_bytes()) {
            Ok(b) => Timestamp(Repr::Canonical(b)),
            Err(_) => Timestamp(Repr::Other(s.into())),
        }
    }

    /// The timestamp as written.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Only ever filled from ASCII digits and separators, or from a `String`.
            Repr::Canonical(b) => std::str::from_utf8(b).unwrap_or_default(),
            Repr::Other(s) => s,
        }
    }

    /// Milliseconds since the epoch, when the string has the canonical shape.
    pub fn unix_millis(&self) -> Option<i64> {
        let text = self.as_str();
        let b = text.as_bytes();
        if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[23] != b'Z' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> { text.get(r)?.parse().ok() };
        let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (h, mi, s, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
        Some(days_from_civil(y, mo, d) * 86_400_000 + ((h * 60 + mi) * 60 + s) * 1000 + ms)
    }
}

// Howard Hinnant's civil calendar algorithms.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a timestamp string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Timestamp, E> {
                Ok(Timestamp::from_text(v))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Timestamp, E> {
                Ok(Timestamp::from_string(v))
            }
        }
        d.deserialize_str(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_millis() {
        for ms in [
            0,
            1,
            999,
            86_399_999,
            951_782_400_000,
            1_784_344_222_531,
            4_102_444_800_000,
        ] {
            let t = Timestamp::from_unix_millis(ms);
            assert_eq!(t.unix_millis(), Some(ms), "{t}");
        }
        assert_eq!(
            Timestamp::from_unix_millis(951_782_400_000).as_str(),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            Timestamp::from_string("yesterday".into()).unix_millis(),
            None
        );
        // Any 24-byte string is kept inline, and kept as it was.
        let odd = Timestamp::from_string("é-is-two-bytes-so-24-b.".into());
        assert_eq!(odd.as_str(), "é-is-two-bytes-so-24-b.");
        assert_eq!(
            Timestamp::from_unix_millis(-1).as_str(),
            "1969-12-31T23:59:59.999Z"
        );
    }
}
