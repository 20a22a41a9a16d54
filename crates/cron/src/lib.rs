//! kbatch-cron: cron schedules with the exact semantics of robfig/cron v3 `ParseStandard` and
//! `Schedule.Next`, which the upstream CronJob controller uses.
//!
//! * Five fields (minute hour day-of-month month day-of-week), or a descriptor (`@daily`,
//!   `@every 90m`, ...), optionally prefixed by `TZ=<zone> ` or `CRON_TZ=<zone> `.
//! * Parse errors carry robfig's error text verbatim (Kubernetes embeds it in validation errors).
//! * [`Schedule::next`] reproduces robfig's walk including its DST behaviour: a wall time in a
//!   spring-forward gap is skipped and one in a fall-back hour fires twice.
//!
//! Time zones come from jiff's bundled IANA database, so results do not depend on the host.
//!
//! ```
//! use jiff::{Timestamp, tz::TimeZone};
//! use kbatch_cron::Schedule;
//!
//! let s = Schedule::parse("TZ=America/New_York 30 2 * * *").unwrap();
//! let after: Timestamp = "2024-03-09T12:00:00Z".parse().unwrap();
//! // 02:30 does not exist on 2024-03-10 in New York, so that day is skipped.
//! let next = s.next(after, &TimeZone::UTC).unwrap();
//! assert_eq!(next.to_string(), "2024-03-11T06:30:00Z");
//!
//! let err = Schedule::parse("0 0 * * 7").unwrap_err();
//! assert_eq!(err.to_string(), "end of range (7) above maximum (6): 7");
//! ```

mod golang;
mod walk;

/// Go's `%q` (`strconv.Quote`), for messages that must read as upstream's.
pub use golang::quote as go_quote;

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// Go's `time.ParseDuration` for a non-negative duration (`100ms`, `2s`, `1h30m`), with Go's
/// error text; the format of every duration flag and annotation kbatch reads.
pub fn parse_go_duration(s: &str) -> Result<std::time::Duration, String> {
    let nanos = golang::parse_duration(s)?;
    u64::try_from(nanos)
        .map(std::time::Duration::from_nanos)
        .map_err(|_| format!("negative duration {s:?}"))
}

/// Go's `time.Duration.String()` of `nanos` (`1h2m3.5s`, `15.001s`, `500ms`, `0s`): how
/// kubelet words its back-offs and metrics-server its windows.
pub fn format_go_duration(nanos: i64) -> String {
    golang::format_duration(nanos)
}

/// A parse error; its `Display` is robfig's error text, which upstream validation embeds in
/// `spec.schedule: Invalid value: "<schedule>": <text>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// A failed zone lookup; its `Display` is Go's `time.LoadLocation` error text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LoadLocationError(pub String);

/// Set on a field parsed from `*` or `?` (and not cleared by a step above 1); it switches the
/// day-of-month/day-of-week combination from OR to AND.
pub(crate) const STAR_BIT: u64 = 1 << 63;

/// One bit per allowed value of each field, plus [`STAR_BIT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fields {
    pub(crate) second: u64,
    pub(crate) minute: u64,
    pub(crate) hour: u64,
    pub(crate) dom: u64,
    pub(crate) month: u64,
    pub(crate) dow: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Spec(Fields),
    /// `@every`: a constant delay in whole seconds (at least one).
    Every {
        seconds: i64,
    },
}

/// A parsed schedule (five fields or a descriptor, optionally with a TZ=/CRON_TZ= prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    kind: Kind,
    /// `None` is Go's `time.Local` (no prefix, or `TZ=Local`): the caller's default zone.
    location: Option<TimeZone>,
}

struct Bounds {
    min: u64,
    max: u64,
    names: &'static [&'static str],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
/// Index + 1 is the month number.
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// Index is the weekday number, Sunday = 0.
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl Bounds {
    fn name_value(&self, s: &str) -> Option<u64> {
        if self.names.is_empty() {
            return None;
        }
        let lower = golang::name_lower(s);
        let i = self.names.iter().position(|n| *n == lower)?;
        Some(i as u64 + if self.min == 1 { 1 } else { 0 })
    }

    fn all(&self) -> u64 {
        bits(self.min, self.max, 1) | STAR_BIT
    }
}

fn err<T>(msg: String) -> Result<T, ParseError> {
    Err(ParseError(msg))
}

/// Whether `spec` starts with a zone prefix in robfig's sense (`TZ=` or `CRON_TZ=`).
///
/// Note that Kubernetes' own checks are looser: they look for `TZ` anywhere in the schedule.
pub fn has_tz_prefix(spec: &str) -> bool {
    spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=")
}

/// Go's `time.LoadLocation` against the bundled IANA database. `Ok(None)` is Go's `Local`;
/// `""` and `"UTC"` are UTC. Names are case-sensitive, as on a Linux file system.
pub fn load_location(name: &str) -> Result<Option<TimeZone>, LoadLocationError> {
    if name.is_empty() || name == "UTC" {
        return Ok(Some(TimeZone::UTC));
    }
    if name == "Local" {
        return Ok(None);
    }
    if name.contains("..") || name.starts_with('/') || name.starts_with('\\') {
        return Err(LoadLocationError("time: invalid location name".to_string()));
    }
    match jiff::tz::db().get(name) {
        // jiff's lookup ignores case; Go's file-based one does not.
        Ok(tz) if tz.iana_name() == Some(name) => Ok(Some(tz)),
        _ => Err(LoadLocationError(format!("unknown time zone {name}"))),
    }
}

impl Schedule {
    /// robfig's `ParseStandard`.
    pub fn parse(spec: &str) -> Result<Schedule, ParseError> {
        if spec.is_empty() {
            return err("empty spec string".to_string());
        }
        let mut spec = spec;
        let mut location = None;
        if has_tz_prefix(spec) {
            // The prefix ends at '=', and its zone name at the first ASCII space. Without a
            // space robfig panics (slice out of range); here the whole rest is taken as the
            // name, which then leaves an empty (so invalid) schedule.
            let eq = spec.find('=').map_or(0, |i| i + 1);
            let end = spec.find(' ').unwrap_or(spec.len());
            let name = spec.get(eq..end).unwrap_or("");
            location = load_location(name)
                .map_err(|e| ParseError(format!("provided bad location {name}: {e}")))?;
            spec = spec.get(end..).unwrap_or("").trim();
        }

        if spec.starts_with('@') {
            return parse_descriptor(spec, location);
        }

        let fields: Vec<&str> = spec.split_whitespace().collect();
        if fields.len() != 5 {
            return err(format!(
                "expected exactly 5 fields, found {}: [{}]",
                fields.len(),
                fields.join(" ")
            ));
        }
        let parsed = Fields {
            second: 1,
            minute: field(fields[0], &MINUTES)?,
            hour: field(fields[1], &HOURS)?,
            dom: field(fields[2], &DOM)?,
            month: field(fields[3], &MONTHS)?,
            dow: field(fields[4], &DOW)?,
        };
        Ok(Schedule {
            kind: Kind::Spec(parsed),
            location,
        })
    }

    /// The zone from a `TZ=`/`CRON_TZ=` prefix; `None` without one (or for `TZ=Local`), in
    /// which case [`Schedule::next`] uses its `default_zone`.
    pub fn location(&self) -> Option<&TimeZone> {
        self.location.as_ref()
    }

    /// For `@every <duration>`: the delay between activations (whole seconds, at least one).
    pub fn constant_delay(&self) -> Option<jiff::SignedDuration> {
        match self.kind {
            Kind::Every { seconds } => Some(jiff::SignedDuration::from_secs(seconds)),
            Kind::Spec(_) => None,
        }
    }

    /// The first activation strictly after `after`, in the schedule's zone (from the TZ= prefix,
    /// else `default_zone`, which plays Go's `time.Local`: upstream passes the controller's local
    /// time). `None` where robfig returns the zero time (nothing within five years, e.g.
    /// `0 0 30 2 *`), where robfig's walk would never return (a zone that skips a whole day,
    /// such as Pacific/Apia on 2011-12-30), or beyond jiff's supported range.
    pub fn next(&self, after: Timestamp, default_zone: &TimeZone) -> Option<Timestamp> {
        match self.kind {
            Kind::Spec(ref f) => {
                walk::next(f, self.location.as_ref().unwrap_or(default_zone), after)
            }
            // robfig ignores the zone here: the next activation is `after` on a whole second
            // plus the delay.
            Kind::Every { seconds } => {
                let floor = after.as_nanosecond().div_euclid(1_000_000_000);
                let secs = i64::try_from(floor).ok()?.checked_add(seconds)?;
                Timestamp::from_second(secs).ok()
            }
        }
    }

    /// Successive activations after `after` (each one fed back into [`Schedule::next`]).
    pub fn upcoming<'a>(&'a self, after: Timestamp, default_zone: &'a TimeZone) -> Upcoming<'a> {
        Upcoming {
            schedule: self,
            zone: default_zone,
            last: Some(after),
        }
    }
}

/// Iterator returned by [`Schedule::upcoming`].
#[derive(Debug, Clone)]
pub struct Upcoming<'a> {
    schedule: &'a Schedule,
    zone: &'a TimeZone,
    last: Option<Timestamp>,
}

impl Iterator for Upcoming<'_> {
    type Item = Timestamp;

    fn next(&mut self) -> Option<Timestamp> {
        let next = self.schedule.next(self.last?, self.zone);
        self.last = next;
        next
    }
}

impl std::str::FromStr for Schedule {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Schedule, ParseError> {
        Schedule::parse(s)
    }
}

fn parse_descriptor(descriptor: &str, location: Option<TimeZone>) -> Result<Schedule, ParseError> {
    let spec = |minute, hour, dom, month, dow| Schedule {
        kind: Kind::Spec(Fields {
            second: 1,
            minute,
            hour,
            dom,
            month,
            dow,
        }),
        location: location.clone(),
    };
    match descriptor {
        "@yearly" | "@annually" => return Ok(spec(1, 1, 1 << 1, 1 << 1, DOW.all())),
        "@monthly" => return Ok(spec(1, 1, 1 << 1, MONTHS.all(), DOW.all())),
        "@weekly" => return Ok(spec(1, 1, DOM.all(), MONTHS.all(), 1)),
        "@daily" | "@midnight" => return Ok(spec(1, 1, DOM.all(), MONTHS.all(), DOW.all())),
        "@hourly" => return Ok(spec(1, HOURS.all(), DOM.all(), MONTHS.all(), DOW.all())),
        _ => {}
    }
    if let Some(text) = descriptor.strip_prefix("@every ") {
        let nanos = golang::parse_duration(text)
            .map_err(|e| ParseError(format!("failed to parse duration {descriptor}: {e}")))?;
        // robfig's Every: below one second becomes one second, sub-second parts are dropped.
        let seconds = (nanos / 1_000_000_000).max(1);
        return Ok(Schedule {
            kind: Kind::Every { seconds },
            location,
        });
    }
    err(format!("unrecognized descriptor: {descriptor}"))
}

/// A comma-separated list of ranges; empty items are skipped, as Go's `FieldsFunc` does.
fn field(text: &str, r: &Bounds) -> Result<u64, ParseError> {
    let mut acc = 0;
    for expr in text.split(',').filter(|s| !s.is_empty()) {
        acc |= range(expr, r)?;
    }
    Ok(acc)
}

/// `number | number "-" number [ "/" number ]`, with `*`/`?` for the whole range.
fn range(expr: &str, r: &Bounds) -> Result<u64, ParseError> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;

    let (start, mut end, mut extra);
    if low_and_high[0] == "*" || low_and_high[0] == "?" {
        // robfig ignores anything after a star's hyphen (`*-5` is `*`).
        (start, end, extra) = (r.min, r.max, STAR_BIT);
    } else {
        start = int_or_name(low_and_high[0], r)?;
        end = match low_and_high.len() {
            1 => start,
            2 => int_or_name(low_and_high[1], r)?,
            _ => return err(format!("too many hyphens: {expr}")),
        };
        extra = 0;
    }

    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = non_negative_int(range_and_step[1])?;
            // "N/step" means "N-max/step".
            if single {
                end = r.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return err(format!("too many slashes: {expr}")),
    };

    if start < r.min {
        return err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            r.min
        ));
    }
    if end > r.max {
        return err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            r.max
        ));
    }
    if start > end {
        return err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(bits(start, end, step) | extra)
}

fn int_or_name(expr: &str, r: &Bounds) -> Result<u64, ParseError> {
    match r.name_value(expr) {
        Some(v) => Ok(v),
        None => non_negative_int(expr),
    }
}

fn non_negative_int(expr: &str) -> Result<u64, ParseError> {
    let num = golang::atoi(expr)
        .map_err(|e| ParseError(format!("failed to parse int from {expr}: {e}")))?;
    u64::try_from(num).or_else(|_| err(format!("negative number ({num}) not allowed: {expr}")))
}

/// Bits `min..=max` taking every `step`-th; callers guarantee `max <= 59`.
fn bits(min: u64, max: u64, step: u64) -> u64 {
    let mut acc = 0;
    let mut i = min;
    while i <= max {
        acc |= 1 << i;
        match i.checked_add(step) {
            Some(n) => i = n,
            None => break,
        }
    }
    acc
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod go_duration_tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_go_durations() {
        assert_eq!(format_go_duration(0), "0s");
        assert_eq!(format_go_duration(15_123_000_000), "15.123s");
        assert_eq!(format_go_duration(15_000_000_000), "15s");
        assert_eq!(format_go_duration(1_000_123_000), "1.000123s");
        assert_eq!(format_go_duration(500_000_000), "500ms");
        assert_eq!(format_go_duration(1_500_000), "1.5ms");
        assert_eq!(format_go_duration(2_500), "2.5µs");
        assert_eq!(format_go_duration(999), "999ns");
        assert_eq!(format_go_duration(61_000_000_000), "1m1s");
        assert_eq!(format_go_duration(3_600_000_000_000), "1h0m0s");
        assert_eq!(format_go_duration(-1_500_000_000), "-1.5s");
    }

    #[test]
    fn parses_go_durations() {
        let ms = Duration::from_millis;
        for (input, want) in [
            ("0", Duration::ZERO),
            ("5s", ms(5000)),
            ("1500ms", ms(1500)),
            ("1.5s", ms(1500)),
            (".5s", ms(500)),
            ("1m30s", ms(90_000)),
            ("1h", ms(3_600_000)),
            ("2h45m", ms(9_900_000)),
            ("100us", Duration::from_micros(100)),
            ("100µs", Duration::from_micros(100)),
            ("3ns", Duration::from_nanos(3)),
            ("+2s", ms(2000)),
            ("1.000000001s", Duration::from_nanos(1_000_000_001)),
        ] {
            assert_eq!(parse_go_duration(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for input in [
            "",
            "s",
            "1",
            "1x",
            "abc",
            ".s",
            "1..5s",
            "-1s",
            "9999999999h",
        ] {
            assert!(
                parse_go_duration(input).is_err(),
                "{input} should be rejected"
            );
        }
        assert_eq!(
            parse_go_duration("2").unwrap_err(),
            "time: missing unit in duration \"2\""
        );
        assert_eq!(
            parse_go_duration("2d").unwrap_err(),
            "time: unknown unit \"d\" in duration \"2d\""
        );
    }
}
