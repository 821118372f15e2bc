//! Envelope timestamps: UTC, millisecond precision, ending in `Z` (JavaScript's `toISOString`).

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An envelope timestamp.
///
/// Kept as the exact string that was built or parsed, so a message read from a trace serializes
/// back to the same bytes. Built timestamps are always `YYYY-MM-DDTHH:MM:SS.mmmZ`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timestamp(String);

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Timestamp {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Timestamp::from_unix_millis(ms)
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
        Timestamp(format!(
            "{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z"
        ))
    }

    /// Wraps a string as a timestamp without checking its shape.
    pub fn from_string(s: String) -> Timestamp {
        Timestamp(s)
    }

    /// The timestamp as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Milliseconds since the epoch, when the string has the canonical shape.
    pub fn unix_millis(&self) -> Option<i64> {
        let b = self.0.as_bytes();
        if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[23] != b'Z' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> { self.0.get(r)?.parse().ok() };
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
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Timestamp)
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
    }
}
