//! robfig's `SpecSchedule.Next` walk, on whole Unix seconds.
//!
//! Go mixes two kinds of arithmetic and the DST behaviour comes from that mix: `time.Date` and
//! `AddDate` build a wall-clock time and resolve it with Go's own two-lookup rule, while `t.Add`
//! moves absolute time. A wall time in a spring-forward gap therefore gets skipped and one in a
//! fall-back hour is reached twice, exactly as upstream does.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::{Fields, STAR_BIT};

/// Wall-clock fields of an instant in a zone, as Go's `Time` accessors report them.
#[derive(Debug, Clone, Copy)]
struct Clock {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    weekday: i64,
}

fn offset(tz: &TimeZone, unix: i64) -> Option<i64> {
    let ts = Timestamp::from_second(unix).ok()?;
    Some(i64::from(tz.to_offset(ts).seconds()))
}

fn clock(tz: &TimeZone, unix: i64) -> Option<Clock> {
    let local = unix.checked_add(offset(tz, unix)?)?;
    let days = local.div_euclid(86_400);
    let secs = local.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    Some(Clock {
        year,
        month,
        day,
        hour: secs / 3600,
        minute: secs / 60 % 60,
        second: secs % 60,
        // 1970-01-01 was a Thursday; Go numbers weekdays from Sunday = 0.
        weekday: (days + 4).rem_euclid(7),
    })
}

/// Go's `time.Date`: normalise out-of-range fields, then resolve the wall time with Go's rule
/// (look the offset up at the wall time taken as UTC, then again at the UTC guess it yields).
/// In a gap or fold this picks what Go picks, which is not always what jiff's disambiguation
/// modes would.
fn date(tz: &TimeZone, year: i64, month: i64, day: i64, hms: (i64, i64, i64)) -> Option<i64> {
    let (hour, min, sec) = hms;
    let m0 = month - 1;
    let year = year + m0.div_euclid(12);
    let month = m0.rem_euclid(12) + 1;
    let days = days_from_civil(year, month, 1) + day - 1;
    let local = days
        .checked_mul(86_400)?
        .checked_add(hour * 3600 + min * 60 + sec)?;
    let first = offset(tz, local)?;
    let second = offset(tz, local - first)?;
    local.checked_sub(second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1..=12).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn has(bits: u64, v: i64) -> bool {
    (0..64).contains(&v) && bits & (1u64 << v) != 0
}

fn day_matches(f: &Fields, c: &Clock) -> bool {
    let dom = has(f.dom, c.day);
    let dow = has(f.dow, c.weekday);
    if f.dom & STAR_BIT != 0 || f.dow & STAR_BIT != 0 {
        dom && dow
    } else {
        dom || dow
    }
}

/// Whether no instant can ever match. robfig would search five years and return the zero time;
/// answering at once is equivalent and avoids millions of steps for an empty minute field.
fn never_matches(f: &Fields) -> bool {
    let empty = |b: u64| b & !STAR_BIT == 0;
    let day_empty = if f.dom & STAR_BIT != 0 || f.dow & STAR_BIT != 0 {
        empty(f.dom) || empty(f.dow)
    } else {
        empty(f.dom) && empty(f.dow)
    };
    empty(f.second) || empty(f.minute) || empty(f.hour) || empty(f.month) || day_empty
}

/// The first value set in `bits` from `from` up to `limit` (exclusive), or `limit`.
fn next_set(bits: u64, from: i64, limit: i64) -> i64 {
    (from..limit).find(|v| has(bits, *v)).unwrap_or(limit)
}

/// Whether the zone keeps one offset from `t` through `t + d`: then robfig's `d` steps of one
/// unit visit the wall times in between in order, and jumping straight over them lands where
/// they would.
fn offset_holds(tz: &TimeZone, t: i64, d: i64) -> bool {
    let Ok(ts) = Timestamp::from_second(t) else {
        return false;
    };
    match tz.following(ts).next() {
        Some(transition) => transition.timestamp().as_second() > t + d,
        None => true,
    }
}

/// The first activation strictly after `after`, or `None` where robfig returns the zero time.
pub(crate) fn next(f: &Fields, tz: &TimeZone, after: Timestamp) -> Option<Timestamp> {
    walk(f, tz, after, true)
}

/// robfig's walk. With `jumps`, the minute and second steps skip values that cannot match
/// where the zone's offset holds (robfig steps through each: 59 steps from one `* * * * *`
/// activation to the next); without, every step is taken, as the reference the tests hold
/// the jumps to.
fn walk(f: &Fields, tz: &TimeZone, after: Timestamp, jumps: bool) -> Option<Timestamp> {
    if never_matches(f) {
        return None;
    }
    // Start at the next whole second, as `t.Add(1s - t.Nanosecond())` does.
    let floor = after.as_nanosecond().div_euclid(1_000_000_000);
    let mut t = i64::try_from(floor).ok()?.checked_add(1)?;
    let mut added = false;
    let year_limit = clock(tz, t)?.year + 5;
    // robfig can loop forever where a zone skips a whole day (Pacific/Apia, 2011-12-30): the
    // day step lands back where it started. That fixed point is caught below; this budget
    // guards against any other cycle, and real schedules need far fewer steps.
    let mut budget: u32 = 1_000_000;
    let mut step = || {
        budget = budget.checked_sub(1)?;
        Some(())
    };

    'wrap: loop {
        step()?;
        let mut c = clock(tz, t)?;
        if c.year > year_limit {
            return None;
        }

        while !has(f.month, c.month) {
            step()?;
            if !added {
                added = true;
                t = date(tz, c.year, c.month, 1, (0, 0, 0))?;
                c = clock(tz, t)?;
            }
            let before = t;
            t = add_date(tz, &c, 1, 0)?;
            c = clock(tz, t)?;
            if t == before {
                return None;
            }
            if c.month == 1 {
                continue 'wrap;
            }
        }

        while !day_matches(f, &c) {
            step()?;
            if !added {
                added = true;
                t = date(tz, c.year, c.month, c.day, (0, 0, 0))?;
                c = clock(tz, t)?;
            }
            let before = t;
            t = add_date(tz, &c, 0, 1)?;
            c = clock(tz, t)?;
            // Where midnight does not exist the day lands on 23:00 or 01:00; robfig nudges it
            // back towards midnight by absolute hours.
            if c.hour != 0 {
                if c.hour > 12 {
                    t += (24 - c.hour) * 3600;
                } else {
                    t -= c.hour * 3600;
                }
                c = clock(tz, t)?;
            }
            if t == before {
                return None;
            }
            if c.day == 1 {
                continue 'wrap;
            }
        }

        while !has(f.hour, c.hour) {
            step()?;
            if !added {
                added = true;
                t = date(tz, c.year, c.month, c.day, (c.hour, 0, 0))?;
            }
            t += 3600;
            c = clock(tz, t)?;
            if c.hour == 0 {
                continue 'wrap;
            }
        }

        while !has(f.minute, c.minute) {
            step()?;
            let d = if added {
                60 * (next_set(f.minute, c.minute + 1, 60) - c.minute)
            } else {
                added = true;
                // Go truncates absolute time, not the wall clock; `c` is then not the clock
                // at `t`, so this step is a single one.
                t = t.div_euclid(60) * 60;
                60
            };
            t += if jumps && d > 60 && offset_holds(tz, t, d) {
                d
            } else {
                60
            };
            c = clock(tz, t)?;
            if c.minute == 0 {
                continue 'wrap;
            }
        }

        while !has(f.second, c.second) {
            step()?;
            // The time is already on a whole second, so robfig's truncation is a no-op.
            added = true;
            let d = next_set(f.second, c.second + 1, 60) - c.second;
            t += if jumps && d > 1 && offset_holds(tz, t, d) {
                d
            } else {
                1
            };
            c = clock(tz, t)?;
            if c.second == 0 {
                continue 'wrap;
            }
        }

        return Timestamp::from_second(t).ok();
    }
}

/// Go's `t.AddDate(0, months, days)`: wall-clock fields shifted, then resolved by `time.Date`.
fn add_date(tz: &TimeZone, c: &Clock, months: i64, days: i64) -> Option<i64> {
    date(
        tz,
        c.year,
        c.month + months,
        c.day + days,
        (c.hour, c.minute, c.second),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The jumps land exactly where robfig's single steps do: random minute and second sets
    /// (sparse and dense), in zones with DST of an hour and of half an hour, with offsets that
    /// are not whole minutes (local mean time before 1900), and one that skipped a day; from
    /// starts spread over years and around transitions.
    #[test]
    fn jumps_land_where_single_steps_do() {
        let zones = [
            "UTC",
            "America/New_York",
            "Europe/Berlin",
            "Australia/Lord_Howe",
            "Asia/Kolkata",
            "Africa/Monrovia",
            "Europe/Amsterdam",
            "Pacific/Apia",
            "America/St_Johns",
        ];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let bits = |rand: &mut dyn FnMut() -> u64, n: i64| -> u64 {
            match rand() % 4 {
                0 => 1 << (rand() % n as u64),
                1 => rand() & ((1u64 << n) - 1),
                2 => (1 << (rand() % n as u64)) | (1 << (rand() % n as u64)),
                _ => ((1u64 << n) - 1) | STAR_BIT,
            }
        };
        // Real zones change offset at whole wall-clock minutes or by whole hours, where a jump
        // and the single steps agree even across the change; this rule's changes (by 30 min
        // and 17 s, at 02:17:23 and 03:00:41) are what the offset check is for.
        let odd = TimeZone::posix("XST0XDT-0:30:17,M3.2.0/2:17:23,M11.1.0/3:00:41").unwrap();
        let mut checked = 0;
        for zone in zones.iter().chain(["odd"].iter()) {
            let tz = match *zone {
                "odd" => odd.clone(),
                name => TimeZone::get(name).unwrap(),
            };
            // Starts: around each transition of a few eras, and at random instants.
            let mut starts: Vec<i64> = Vec::new();
            for year in [1890, 1937, 2011, 2024] {
                let from = Timestamp::from_second(days_from_civil(year, 1, 1) * 86_400).unwrap();
                for tr in tz.following(from).take(4) {
                    let at = tr.timestamp().as_second();
                    starts.extend([at - 3600, at - 1799, at - 61, at - 37, at - 1, at, at + 59]);
                }
            }
            for _ in 0..10 {
                starts.push((rand() % (130 * 365 * 86_400)) as i64 - 60 * 365 * 86_400);
            }
            for start in starts {
                for _ in 0..12 {
                    let f = Fields {
                        second: bits(&mut rand, 60),
                        minute: bits(&mut rand, 60),
                        hour: if rand() % 2 == 0 {
                            bits(&mut rand, 24)
                        } else {
                            ((1u64 << 24) - 1) | STAR_BIT
                        },
                        dom: ((1u64 << 32) - 2) | STAR_BIT,
                        month: ((1u64 << 13) - 2) | STAR_BIT,
                        dow: ((1u64 << 7) - 1) | STAR_BIT,
                    };
                    let mut a = Timestamp::from_second(start).unwrap();
                    for _ in 0..3 {
                        let fast = walk(&f, &tz, a, true);
                        let slow = walk(&f, &tz, a, false);
                        assert_eq!(fast, slow, "{zone} {f:?} after {a}");
                        checked += 1;
                        match fast {
                            Some(n) => a = n,
                            None => break,
                        }
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    /// Go's `time.Date` in gaps and folds, as measured with Go: it is not jiff's `Compatible`
    /// (in New York a gap resolves to the earlier offset, in Berlin a fold to the later one).
    #[test]
    fn go_date_in_gaps_and_folds() {
        for (zone, (y, m, d, h, mi), want) in [
            (
                "America/New_York",
                (2024, 3, 10, 2, 30),
                "2024-03-10T01:30:00-05:00",
            ),
            (
                "America/New_York",
                (2024, 11, 3, 1, 30),
                "2024-11-03T01:30:00-04:00",
            ),
            (
                "Europe/Berlin",
                (2024, 3, 31, 2, 30),
                "2024-03-31T03:30:00+02:00",
            ),
            (
                "Europe/Berlin",
                (2024, 10, 27, 2, 30),
                "2024-10-27T02:30:00+01:00",
            ),
            (
                "Australia/Lord_Howe",
                (2024, 10, 6, 2, 15),
                "2024-10-06T02:45:00+11:00",
            ),
            (
                "Australia/Lord_Howe",
                (2024, 4, 7, 1, 45),
                "2024-04-07T01:45:00+10:30",
            ),
            (
                "Pacific/Apia",
                (2011, 12, 30, 0, 0),
                "2011-12-29T00:00:00-10:00",
            ),
        ] {
            let tz = TimeZone::get(zone).unwrap();
            let got = date(&tz, y, m, d, (h, mi, 0)).unwrap();
            let want: Timestamp = want.parse().unwrap();
            assert_eq!(got, want.as_second(), "{zone} {y}-{m}-{d} {h}:{mi}");
        }
    }

    #[test]
    fn date_normalises_like_go() {
        let utc = TimeZone::UTC;
        let ts = |s: &str| s.parse::<Timestamp>().unwrap().as_second();
        assert_eq!(
            date(&utc, 2024, 13, 1, (0, 0, 0)),
            Some(ts("2025-01-01T00:00:00Z"))
        );
        assert_eq!(
            date(&utc, 2024, 2, 30, (0, 0, 0)),
            Some(ts("2024-03-01T00:00:00Z"))
        );
        assert_eq!(
            date(&utc, 2023, 0, 1, (0, 0, 0)),
            Some(ts("2022-12-01T00:00:00Z"))
        );
        assert_eq!(
            date(&utc, 2024, 12, 32, (25, 0, 0)),
            Some(ts("2025-01-02T01:00:00Z"))
        );
    }

    #[test]
    fn civil_round_trip() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }
}
