//! Tables ported from robfig/cron's parser_test.go, spec_test.go and constantdelay_test.go,
//! plus checks of the Go-compatibility helpers. robfig's own tables use a six-field parser
//! (with seconds); those rows are kept by building the seconds field with the same range parser.

use super::*;
use jiff::civil::DateTime;

const SECONDS: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};

/// robfig's six-field parser (`Second | Minute | Hour | Dom | Month | DowOptional | Descriptor`),
/// for porting its tables: the seconds field is parsed here, the rest by `Schedule::parse`.
fn parse6(spec: &str) -> Schedule {
    let (prefix, rest) = if has_tz_prefix(spec) {
        let i = spec.find(' ').unwrap();
        (&spec[..=i], spec[i..].trim())
    } else {
        ("", spec)
    };
    let (sec, five) = rest.split_once(' ').unwrap();
    let mut s = Schedule::parse(&format!("{prefix}{five}")).unwrap();
    if let Kind::Spec(ref mut f) = s.kind {
        f.second = field(sec, &SECONDS).unwrap();
    }
    s
}

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// A wall time in a zone (robfig's tests use `time.Local`; UTC stands in for it here).
fn wall(s: &str, tz: &TimeZone) -> Timestamp {
    let dt: DateTime = s.parse().unwrap();
    dt.to_zoned(tz.clone()).unwrap().timestamp()
}

fn fields(s: &Schedule) -> Fields {
    match s.kind {
        Kind::Spec(f) => f,
        Kind::Every { .. } => panic!("not a spec schedule"),
    }
}

#[test]
fn range_table() {
    let table: &[(&str, u64, u64, u64, &str)] = &[
        ("5", 0, 7, 1 << 5, ""),
        ("0", 0, 7, 1 << 0, ""),
        ("7", 0, 7, 1 << 7, ""),
        ("5-5", 0, 7, 1 << 5, ""),
        ("5-6", 0, 7, 1 << 5 | 1 << 6, ""),
        ("5-7", 0, 7, 1 << 5 | 1 << 6 | 1 << 7, ""),
        ("5-6/2", 0, 7, 1 << 5, ""),
        ("5-7/2", 0, 7, 1 << 5 | 1 << 7, ""),
        ("5-7/1", 0, 7, 1 << 5 | 1 << 6 | 1 << 7, ""),
        ("*", 1, 3, 1 << 1 | 1 << 2 | 1 << 3 | STAR_BIT, ""),
        ("*/2", 1, 3, 1 << 1 | 1 << 3, ""),
        ("5--5", 0, 0, 0, "too many hyphens: 5--5"),
        (
            "jan-x",
            0,
            0,
            0,
            "failed to parse int from jan: strconv.Atoi: parsing \"jan\": invalid syntax",
        ),
        (
            "2-x",
            1,
            5,
            0,
            "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax",
        ),
        ("*/-12", 0, 0, 0, "negative number (-12) not allowed: -12"),
        ("*//2", 0, 0, 0, "too many slashes: *//2"),
        ("1", 3, 5, 0, "beginning of range (1) below minimum (3): 1"),
        ("6", 3, 5, 0, "end of range (6) above maximum (5): 6"),
        (
            "5-3",
            3,
            5,
            0,
            "beginning of range (5) beyond end of range (3): 5-3",
        ),
        (
            "*/0",
            0,
            0,
            0,
            "step of range should be a positive number: */0",
        ),
    ];
    for &(expr, min, max, want, want_err) in table {
        let b = Bounds {
            min,
            max,
            names: &[],
        };
        match range(expr, &b) {
            Ok(got) => {
                assert!(want_err.is_empty(), "{expr}: expected error {want_err}");
                assert_eq!(got, want, "{expr}");
            }
            Err(e) => assert_eq!(e.to_string(), want_err, "{expr}"),
        }
    }
}

#[test]
fn field_table() {
    let b = Bounds {
        min: 1,
        max: 7,
        names: &[],
    };
    for (expr, want) in [
        ("5", 1 << 5),
        ("5,6", 1 << 5 | 1 << 6),
        ("5,6,7", 1 << 5 | 1 << 6 | 1 << 7),
        ("1,5-7/2,3", 1 << 1 | 1 << 5 | 1 << 7 | 1 << 3),
    ] {
        assert_eq!(field(expr, &b).unwrap(), want, "{expr}");
    }
}

#[test]
fn all_table() {
    for (b, want) in [
        (&MINUTES, 0x0fff_ffff_ffff_ffff_u64),
        (&HOURS, 0xff_ffff),
        (&DOM, 0xffff_fffe),
        (&MONTHS, 0x1ffe),
        (&DOW, 0x7f),
    ] {
        assert_eq!(b.all(), want | STAR_BIT);
    }
}

#[test]
fn bits_table() {
    for (min, max, step, want) in [
        (0, 0, 1, 0x1),
        (1, 1, 1, 0x2),
        (1, 5, 2, 0x2a),
        (1, 4, 2, 0xa),
    ] {
        assert_eq!(bits(min, max, step), want);
    }
}

#[test]
fn parse_schedule_errors() {
    for (expr, want) in [
        (
            "5 j * * *",
            "failed to parse int from j: strconv.Atoi: parsing \"j\": invalid syntax",
        ),
        (
            "@every Xm",
            "failed to parse duration @every Xm: time: invalid duration \"Xm\"",
        ),
        ("@unrecognized", "unrecognized descriptor: @unrecognized"),
        ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
        ("", "empty spec string"),
        ("xyz", "expected exactly 5 fields, found 1: [xyz]"),
        ("60 0 * * *", "end of range (60) above maximum (59): 60"),
        ("0 60 * * *", "end of range (60) above maximum (23): 60"),
        (
            "0 0 * * XYZ",
            "failed to parse int from XYZ: strconv.Atoi: parsing \"XYZ\": invalid syntax",
        ),
        // robfig issue 144: a zero step must be an error, not a hang.
        (
            "TZ=America/New_York 15/0 * * * *",
            "step of range should be a positive number: 15/0",
        ),
        (
            "TZ=America/New_York 15/0 * * *",
            "expected exactly 5 fields, found 4: [15/0 * * *]",
        ),
        (
            "TZ=Nowhere/Special * * * * *",
            "provided bad location Nowhere/Special: unknown time zone Nowhere/Special",
        ),
        (
            "CRON_TZ=../x * * * * *",
            "provided bad location ../x: time: invalid location name",
        ),
    ] {
        assert_eq!(
            Schedule::parse(expr).unwrap_err().to_string(),
            want,
            "{expr:?}"
        );
    }
}

#[test]
fn parse_schedule_table() {
    let every5min = Fields {
        second: 1,
        minute: 1 << 5,
        hour: HOURS.all(),
        dom: DOM.all(),
        month: MONTHS.all(),
        dow: DOW.all(),
    };
    let midnight = Fields {
        second: 1,
        minute: 1,
        hour: 1,
        dom: DOM.all(),
        month: MONTHS.all(),
        dow: DOW.all(),
    };
    let annual = Fields {
        second: 1,
        minute: 1,
        hour: 1,
        dom: 1 << 1,
        month: 1 << 1,
        dow: DOW.all(),
    };
    let tokyo = TimeZone::get("Asia/Tokyo").unwrap();
    let spec = |f, location| Schedule {
        kind: Kind::Spec(f),
        location,
    };
    for (expr, want) in [
        ("5 * * * *", spec(every5min, None)),
        (
            "CRON_TZ=UTC  5 * * * *",
            spec(every5min, Some(TimeZone::UTC)),
        ),
        (
            "CRON_TZ=Asia/Tokyo 5 * * * *",
            spec(every5min, Some(tokyo.clone())),
        ),
        (
            "@every 5m",
            Schedule {
                kind: Kind::Every { seconds: 300 },
                location: None,
            },
        ),
        ("@midnight", spec(midnight, None)),
        ("TZ=UTC  @midnight", spec(midnight, Some(TimeZone::UTC))),
        ("TZ=Asia/Tokyo @midnight", spec(midnight, Some(tokyo))),
        ("@yearly", spec(annual, None)),
        ("@annually", spec(annual, None)),
    ] {
        assert_eq!(Schedule::parse(expr).unwrap(), want, "{expr}");
    }
    assert_eq!(
        fields(&parse6("* 5 * * * *")),
        Fields {
            second: SECONDS.all(),
            ..every5min
        }
    );
    assert_eq!(fields(&parse6("5 5 * * * *")).second, 1 << 5);
}

#[test]
fn star_bit_and_names() {
    let f = fields(&Schedule::parse("*/1 ? */2 jan-MAR sun,Sat").unwrap());
    assert_eq!(f.minute, MINUTES.all());
    assert_eq!(f.hour, HOURS.all());
    assert_eq!(f.dom & STAR_BIT, 0);
    assert_eq!(f.month, 0b1110);
    assert_eq!(f.dow, 1 | 1 << 6);
    // `*-5` ignores what follows the star; `N/step` runs to the maximum.
    assert_eq!(
        fields(&Schedule::parse("*-5 5/20 * * *").unwrap()).minute,
        MINUTES.all()
    );
    assert_eq!(
        fields(&Schedule::parse("5/20 * * * *").unwrap()).minute,
        1 << 5 | 1 << 25 | 1 << 45
    );
    // Go lowercases U+0130 to a plain `i`.
    assert_eq!(
        fields(&Schedule::parse("0 0 * * FR\u{130}").unwrap()).dow,
        1 << 5
    );
}

#[test]
fn activation_table() {
    let utc = TimeZone::UTC;
    let table: &[(&str, &str, bool)] = &[
        ("2012-07-09 15:00", "0/15 * * * *", true),
        ("2012-07-09 15:45", "0/15 * * * *", true),
        ("2012-07-09 15:40", "0/15 * * * *", false),
        ("2012-07-09 15:05", "5/15 * * * *", true),
        ("2012-07-09 15:20", "5/15 * * * *", true),
        ("2012-07-09 15:50", "5/15 * * * *", true),
        ("2012-07-15 15:00", "0/15 * * Jul *", true),
        ("2012-07-15 15:00", "0/15 * * Jun *", false),
        ("2012-07-15 08:30", "30 08 ? Jul Sun", true),
        ("2012-07-15 08:30", "30 08 15 Jul ?", true),
        ("2012-07-16 08:30", "30 08 ? Jul Sun", false),
        ("2012-07-16 08:30", "30 08 15 Jul ?", false),
        ("2012-07-09 15:00", "@hourly", true),
        ("2012-07-09 15:04", "@hourly", false),
        ("2012-07-09 15:00", "@daily", false),
        ("2012-07-09 00:00", "@daily", true),
        ("2012-07-09 00:00", "@weekly", false),
        ("2012-07-08 00:00", "@weekly", true),
        ("2012-07-08 01:00", "@weekly", false),
        ("2012-07-08 00:00", "@monthly", false),
        ("2012-07-01 00:00", "@monthly", true),
        // Both day fields restricted: either may match.
        ("2012-07-15 00:00", "* * 1,15 * Sun", true),
        ("2012-06-15 00:00", "* * 1,15 * Sun", true),
        ("2012-08-01 00:00", "* * 1,15 * Sun", true),
        ("2012-07-15 00:00", "* * */10 * Sun", true),
        // One of them a star: both must match.
        ("2012-07-15 00:00", "* * * * Mon", false),
        ("2012-07-09 00:00", "* * 1,15 * *", false),
        ("2012-07-15 00:00", "* * 1,15 * *", true),
        ("2012-07-15 00:00", "* * */2 * Sun", true),
    ];
    for &(time, spec, want) in table {
        let at = wall(time, &utc);
        let got = Schedule::parse(spec)
            .unwrap()
            .next(at - jiff::SignedDuration::from_secs(1), &utc);
        assert_eq!(got == Some(at), want, "{spec} at {time}");
    }
}

#[test]
fn next_table() {
    let utc = TimeZone::UTC;
    let ny = TimeZone::get("America/New_York").unwrap();
    // (start, its zone (a `TZ=` prefix on the time in robfig's table), six-field spec, want).
    let table: &[(&str, Option<&TimeZone>, &str, &str)] = &[
        (
            "2012-07-09 14:45",
            None,
            "0 0/15 * * * *",
            "2012-07-09 15:00",
        ),
        (
            "2012-07-09 14:59",
            None,
            "0 0/15 * * * *",
            "2012-07-09 15:00",
        ),
        (
            "2012-07-09 14:59:59",
            None,
            "0 0/15 * * * *",
            "2012-07-09 15:00",
        ),
        (
            "2012-07-09 15:45",
            None,
            "0 20-35/15 * * * *",
            "2012-07-09 16:20",
        ),
        (
            "2012-07-09 23:46",
            None,
            "0 */15 * * * *",
            "2012-07-10 00:00",
        ),
        (
            "2012-07-09 23:45",
            None,
            "0 20-35/15 * * * *",
            "2012-07-10 00:20",
        ),
        (
            "2012-07-09 23:35:51",
            None,
            "15/35 20-35/15 * * * *",
            "2012-07-10 00:20:15",
        ),
        (
            "2012-07-09 23:35:51",
            None,
            "15/35 20-35/15 1/2 * * *",
            "2012-07-10 01:20:15",
        ),
        (
            "2012-07-09 23:35:51",
            None,
            "15/35 20-35/15 10-12 * * *",
            "2012-07-10 10:20:15",
        ),
        (
            "2012-07-09 23:35:51",
            None,
            "15/35 20-35/15 1/2 */2 * *",
            "2012-07-11 01:20:15",
        ),
        (
            "2012-07-09 23:35:51",
            None,
            "15/35 20-35/15 * 9-20 * *",
            "2012-07-10 00:20:15",
        ),
        (
            "2012-07-09 23:35:51",
            None,
            "15/35 20-35/15 * 9-20 Jul *",
            "2012-07-10 00:20:15",
        ),
        (
            "2012-07-09 23:35",
            None,
            "0 0 0 9 Apr-Oct ?",
            "2012-08-09 00:00",
        ),
        (
            "2012-07-09 23:35",
            None,
            "0 0 0 */5 Apr,Aug,Oct Mon",
            "2012-08-01 00:00",
        ),
        (
            "2012-07-09 23:35",
            None,
            "0 0 0 */5 Oct Mon",
            "2012-10-01 00:00",
        ),
        (
            "2012-07-09 23:35",
            None,
            "0 0 0 * Feb Mon",
            "2013-02-04 00:00",
        ),
        (
            "2012-07-09 23:35",
            None,
            "0 0 0 * Feb Mon/2",
            "2013-02-01 00:00",
        ),
        (
            "2012-12-31 23:59:45",
            None,
            "0 * * * * *",
            "2013-01-01 00:00:00",
        ),
        (
            "2012-07-09 23:35",
            None,
            "0 0 0 29 Feb ?",
            "2016-02-29 00:00",
        ),
        ("2012-07-09 23:35", None, "0 0 0 30 Feb ?", ""),
        ("2012-07-09 23:35", None, "0 0 0 31 Apr ?", ""),
    ];
    for &(start, zone, spec, want) in table {
        let zone = zone.unwrap_or(&utc);
        let got = parse6(spec).next(wall(start, zone), zone);
        let want = (!want.is_empty()).then(|| wall(want, zone));
        assert_eq!(got, want, "{spec} from {start}");
    }

    // DST rows: absolute times, the schedule zone from the prefix, the caller's zone UTC.
    let dst: &[(&str, &str, &str)] = &[
        (
            "2012-03-11T00:00:00-05:00",
            "TZ=America/New_York 0 30 2 11 Mar ?",
            "2013-03-11T02:30:00-04:00",
        ),
        (
            "2012-03-11T00:00:00-05:00",
            "TZ=America/New_York 0 0 * * * ?",
            "2012-03-11T01:00:00-05:00",
        ),
        (
            "2012-03-11T01:00:00-05:00",
            "TZ=America/New_York 0 0 * * * ?",
            "2012-03-11T03:00:00-04:00",
        ),
        (
            "2012-03-11T03:00:00-04:00",
            "TZ=America/New_York 0 0 * * * ?",
            "2012-03-11T04:00:00-04:00",
        ),
        (
            "2012-03-11T04:00:00-04:00",
            "TZ=America/New_York 0 0 * * * ?",
            "2012-03-11T05:00:00-04:00",
        ),
        (
            "2012-03-11T00:00:00-05:00",
            "CRON_TZ=America/New_York 0 0 * * * ?",
            "2012-03-11T01:00:00-05:00",
        ),
        (
            "2012-03-11T01:00:00-05:00",
            "CRON_TZ=America/New_York 0 0 * * * ?",
            "2012-03-11T03:00:00-04:00",
        ),
        (
            "2012-03-11T03:00:00-04:00",
            "CRON_TZ=America/New_York 0 0 * * * ?",
            "2012-03-11T04:00:00-04:00",
        ),
        (
            "2012-03-11T04:00:00-04:00",
            "CRON_TZ=America/New_York 0 0 * * * ?",
            "2012-03-11T05:00:00-04:00",
        ),
        (
            "2012-03-11T00:00:00-05:00",
            "TZ=America/New_York 0 0 1 * * ?",
            "2012-03-11T01:00:00-05:00",
        ),
        (
            "2012-03-11T01:00:00-05:00",
            "TZ=America/New_York 0 0 1 * * ?",
            "2012-03-12T01:00:00-04:00",
        ),
        (
            "2012-03-11T00:00:00-05:00",
            "TZ=America/New_York 0 0 2 * * ?",
            "2012-03-12T02:00:00-04:00",
        ),
        (
            "2012-11-04T00:00:00-04:00",
            "TZ=America/New_York 0 30 2 04 Nov ?",
            "2012-11-04T02:30:00-05:00",
        ),
        (
            "2012-11-04T01:45:00-04:00",
            "TZ=America/New_York 0 30 1 04 Nov ?",
            "2012-11-04T01:30:00-05:00",
        ),
        (
            "2012-11-04T00:00:00-04:00",
            "TZ=America/New_York 0 0 * * * ?",
            "2012-11-04T01:00:00-04:00",
        ),
        (
            "2012-11-04T01:00:00-04:00",
            "TZ=America/New_York 0 0 * * * ?",
            "2012-11-04T01:00:00-05:00",
        ),
        (
            "2012-11-04T01:00:00-05:00",
            "TZ=America/New_York 0 0 * * * ?",
            "2012-11-04T02:00:00-05:00",
        ),
        (
            "2012-11-04T00:00:00-04:00",
            "TZ=America/New_York 0 0 1 * * ?",
            "2012-11-04T01:00:00-04:00",
        ),
        (
            "2012-11-04T01:00:00-04:00",
            "TZ=America/New_York 0 0 1 * * ?",
            "2012-11-04T01:00:00-05:00",
        ),
        (
            "2012-11-04T01:00:00-05:00",
            "TZ=America/New_York 0 0 1 * * ?",
            "2012-11-05T01:00:00-05:00",
        ),
        (
            "2012-11-04T00:00:00-04:00",
            "TZ=America/New_York 0 0 2 * * ?",
            "2012-11-04T02:00:00-05:00",
        ),
        (
            "2012-11-04T02:00:00-05:00",
            "TZ=America/New_York 0 0 2 * * ?",
            "2012-11-05T02:00:00-05:00",
        ),
        (
            "2012-11-04T00:00:00-04:00",
            "TZ=America/New_York 0 0 3 * * ?",
            "2012-11-04T03:00:00-05:00",
        ),
        (
            "2012-11-04T03:00:00-05:00",
            "TZ=America/New_York 0 0 3 * * ?",
            "2012-11-05T03:00:00-05:00",
        ),
        (
            "2012-11-04T00:00:00-04:00",
            "TZ=America/New_York 0 0 3 3 * ?",
            "2012-12-03T03:00:00-05:00",
        ),
        // robfig issue 157: midnight does not exist on a DST day in Sao Paulo.
        (
            "2018-10-17T05:00:00-04:00",
            "TZ=America/Sao_Paulo 0 0 9 10 * ?",
            "2018-11-10T06:00:00-05:00",
        ),
        (
            "2018-02-14T05:00:00-05:00",
            "TZ=America/Sao_Paulo 0 0 9 22 * ?",
            "2018-02-22T07:00:00-05:00",
        ),
    ];
    for &(start, spec, want) in dst {
        assert_eq!(
            parse6(spec).next(ts(start), &utc),
            Some(ts(want)),
            "{spec} from {start}"
        );
    }

    // The same fall-back rows with the zone as the caller's default instead of a prefix.
    let local: &[(&str, &str, &str)] = &[
        (
            "2012-11-04T00:00:00-04:00",
            "0 0 * * * ?",
            "2012-11-04T01:00:00-04:00",
        ),
        (
            "2012-11-04T01:00:00-04:00",
            "0 0 * * * ?",
            "2012-11-04T01:00:00-05:00",
        ),
        (
            "2012-11-04T01:00:00-05:00",
            "0 0 * * * ?",
            "2012-11-04T02:00:00-05:00",
        ),
        (
            "2012-11-04T00:00:00-04:00",
            "0 0 1 * * ?",
            "2012-11-04T01:00:00-04:00",
        ),
        (
            "2012-11-04T01:00:00-04:00",
            "0 0 1 * * ?",
            "2012-11-04T01:00:00-05:00",
        ),
        (
            "2012-11-04T01:00:00-05:00",
            "0 0 1 * * ?",
            "2012-11-05T01:00:00-05:00",
        ),
        (
            "2012-11-04T00:00:00-04:00",
            "0 0 2 * * ?",
            "2012-11-04T02:00:00-05:00",
        ),
        (
            "2012-11-04T02:00:00-05:00",
            "0 0 2 * * ?",
            "2012-11-05T02:00:00-05:00",
        ),
        (
            "2012-11-04T00:00:00-04:00",
            "0 0 3 * * ?",
            "2012-11-04T03:00:00-05:00",
        ),
        (
            "2012-11-04T03:00:00-05:00",
            "0 0 3 * * ?",
            "2012-11-05T03:00:00-05:00",
        ),
    ];
    for &(start, spec, want) in local {
        assert_eq!(
            parse6(spec).next(ts(start), &ny),
            Some(ts(want)),
            "{spec} from {start}"
        );
    }
}

#[test]
fn next_with_caller_zone() {
    // robfig's TestNextWithTz: the caller's time carries a fixed +05:30 offset.
    let ist = TimeZone::fixed(jiff::tz::offset(5) + jiff::SignedDuration::from_mins(30));
    for (start, spec, want) in [
        (
            "2016-01-03T13:09:03+05:30",
            "14 14 * * *",
            "2016-01-03T14:14:00+05:30",
        ),
        (
            "2016-01-03T04:09:03+05:30",
            "14 14 * * ?",
            "2016-01-03T14:14:00+05:30",
        ),
        (
            "2016-01-03T14:09:03+05:30",
            "14 14 * * *",
            "2016-01-03T14:14:00+05:30",
        ),
        (
            "2016-01-03T14:00:00+05:30",
            "14 14 * * ?",
            "2016-01-03T14:14:00+05:30",
        ),
    ] {
        let s = Schedule::parse(spec).unwrap();
        assert_eq!(
            s.next(ts(start), &ist),
            Some(ts(want)),
            "{spec} from {start}"
        );
    }
}

#[test]
fn constant_delay_table() {
    let utc = TimeZone::UTC;
    // (start, @every duration, want); the duration is in Go syntax, as `@every` takes it.
    for (start, every, want) in [
        ("2012-07-09 14:45", "15m50ns", "2012-07-09 15:00"),
        ("2012-07-09 14:59", "15m", "2012-07-09 15:14"),
        ("2012-07-09 14:59:59", "15m", "2012-07-09 15:14:59"),
        ("2012-07-09 15:45", "35m", "2012-07-09 16:20"),
        ("2012-07-09 23:46", "14m", "2012-07-10 00:00"),
        ("2012-07-09 23:45", "35m", "2012-07-10 00:20"),
        ("2012-07-09 23:35:51", "44m24s", "2012-07-10 00:20:15"),
        ("2012-07-09 23:35:51", "25h44m24s", "2012-07-11 01:20:15"),
        ("2012-07-09 23:35", "2184h25m", "2012-10-09 00:00"),
        ("2012-12-31 23:59:45", "15s", "2013-01-01 00:00:00"),
        ("2012-07-09 14:45:00", "15ms", "2012-07-09 14:45:01"),
        ("2012-07-09 14:45:00.005", "15m", "2012-07-09 15:00"),
        ("2012-07-09 14:45:00.005", "15m50ns", "2012-07-09 15:00"),
    ] {
        let s = Schedule::parse(&format!("@every {every}")).unwrap();
        assert_eq!(
            s.next(wall(start, &utc), &utc),
            Some(wall(want, &utc)),
            "{every} from {start}"
        );
    }
}

#[test]
fn go_atoi() {
    for (s, want) in [
        ("0", Ok(0)),
        ("+5", Ok(5)),
        ("-0", Ok(0)),
        ("-12", Ok(-12)),
        ("000000000000000000000000007", Ok(7)),
        ("9223372036854775807", Ok(i64::MAX)),
        ("-9223372036854775808", Ok(i64::MIN)),
        ("", Err("strconv.Atoi: parsing \"\": invalid syntax")),
        ("+", Err("strconv.Atoi: parsing \"+\": invalid syntax")),
        ("1_0", Err("strconv.Atoi: parsing \"1_0\": invalid syntax")),
        (
            "9223372036854775808",
            Err("strconv.Atoi: parsing \"9223372036854775808\": value out of range"),
        ),
        (
            "99999999999999999999x",
            Err("strconv.Atoi: parsing \"99999999999999999999x\": value out of range"),
        ),
        (
            "\u{1}",
            Err("strconv.Atoi: parsing \"\\x01\": invalid syntax"),
        ),
        (
            "é\u{200b}",
            Err("strconv.Atoi: parsing \"é\\u200b\": invalid syntax"),
        ),
    ] {
        assert_eq!(golang::atoi(s), want.map_err(str::to_string), "{s:?}");
    }
}

#[test]
fn go_parse_duration() {
    for (s, want) in [
        ("0", Ok(0)),
        ("-0", Ok(0)),
        ("1h30m", Ok(5_400_000_000_000)),
        ("1.5s", Ok(1_500_000_000)),
        (".5s", Ok(500_000_000)),
        ("1µs", Ok(1_000)),
        ("-1ns", Ok(-1)),
        ("9223372036854775807ns", Ok(i64::MAX)),
        ("", Err("time: invalid duration \"\"")),
        ("1", Err("time: missing unit in duration \"1\"")),
        ("1d", Err("time: unknown unit \"d\" in duration \"1d\"")),
        (
            "1é",
            Err("time: unknown unit \"\\xc3\\xa9\" in duration \"1\\xc3\\xa9\""),
        ),
        (
            "9223372036854775808ns",
            Err("time: invalid duration \"9223372036854775808ns\""),
        ),
    ] {
        assert_eq!(
            golang::parse_duration(s),
            want.map_err(str::to_string),
            "{s:?}"
        );
    }
}

#[test]
fn locations() {
    assert_eq!(load_location("").unwrap(), Some(TimeZone::UTC));
    assert_eq!(load_location("Local").unwrap(), None);
    assert!(load_location("Europe/London").unwrap().is_some());
    assert_eq!(
        load_location("europe/london").unwrap_err().to_string(),
        "unknown time zone europe/london"
    );
    assert_eq!(
        load_location("/etc/localtime").unwrap_err().to_string(),
        "time: invalid location name"
    );
    let s = Schedule::parse("CRON_TZ=Asia/Kolkata 30 5 * * *").unwrap();
    assert_eq!(
        s.location().and_then(|z| z.iana_name()),
        Some("Asia/Kolkata")
    );
    assert!(
        Schedule::parse("TZ=Local 30 5 * * *")
            .unwrap()
            .location()
            .is_none()
    );
    assert!(has_tz_prefix("CRON_TZ=UTC * * * * *"));
    assert!(!has_tz_prefix(" TZ=UTC * * * * *"));
}

#[test]
fn prefix_without_schedule_is_an_error() {
    // robfig panics here (slice out of range); an ordinary error is returned instead.
    for s in ["TZ=UTC", "TZ=", "CRON_TZ=Asia/Tokyo", "TZ=Nowhere"] {
        assert!(Schedule::parse(s).is_err(), "{s}");
    }
}

#[test]
fn upcoming_and_impossible() {
    let utc = TimeZone::UTC;
    let s = Schedule::parse("0 0 29 2 *").unwrap();
    let got: Vec<_> = s
        .upcoming(ts("2024-01-01T00:00:00Z"), &utc)
        .take(3)
        .collect();
    assert_eq!(
        got,
        [
            ts("2024-02-29T00:00:00Z"),
            ts("2028-02-29T00:00:00Z"),
            ts("2032-02-29T00:00:00Z")
        ]
    );
    let never = Schedule::parse("0 0 30 2 *").unwrap();
    assert_eq!(never.next(ts("2024-01-01T00:00:00Z"), &utc), None);
    assert_eq!(never.upcoming(ts("2024-01-01T00:00:00Z"), &utc).count(), 0);
    assert_eq!(
        Schedule::parse("@every 90m").unwrap().constant_delay(),
        Some(jiff::SignedDuration::from_mins(90))
    );
}

#[test]
fn extremes_do_not_panic() {
    let utc = TimeZone::UTC;
    for spec in [
        "* * * * *",
        "0 0 1 1 *",
        "@every 2562047h",
        "@every 1s",
        "0 0 29 2 *",
    ] {
        let s = Schedule::parse(spec).unwrap();
        for t in [Timestamp::MAX, Timestamp::MIN, ts("9999-12-30T00:00:00Z")] {
            let _ = s.next(t, &utc);
        }
    }
}

/// A small deterministic generator, so the test needs no extra dependency.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn random_strings_do_not_panic() {
    const PIECES: &[&str] = &[
        "0",
        "1",
        "5",
        "7",
        "9",
        "23",
        "31",
        "59",
        "60",
        "99999999999999999999",
        "*",
        "?",
        "/",
        "-",
        ",",
        " ",
        "  ",
        "\t",
        "@",
        "L",
        "W",
        "#",
        "JAN",
        "sun",
        "FRİ",
        "TZ=",
        "CRON_TZ=",
        "UTC",
        "America/New_York",
        "Pacific/Chatham",
        "Local",
        "..",
        "@every ",
        "@daily",
        "h",
        "m",
        "s",
        "µs",
        ".",
        "+",
        "é",
        "\u{200b}",
        "\u{0}",
        "\u{3000}",
        "=",
        "😀",
    ];
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let start = ts("2024-03-09T12:00:00Z");
    let zone = TimeZone::get("Australia/Lord_Howe").unwrap();
    let mut parsed = 0;
    for _ in 0..5000 {
        let n = (rng.next() % 16) as usize;
        let spec: String = (0..n)
            .map(|_| PIECES[(rng.next() % PIECES.len() as u64) as usize])
            .collect();
        if let Ok(s) = Schedule::parse(&spec) {
            parsed += 1;
            let _ = s.upcoming(start, &zone).take(2).count();
        }
    }
    assert!(parsed > 0);

    // Arbitrary code points around cron-looking text.
    for _ in 0..3000 {
        let n = (rng.next() % 12) as usize;
        let spec: String = (0..n)
            .map(|_| match rng.next() % 4 {
                0 => char::from_u32((rng.next() % 0x11_0000) as u32).unwrap_or('?'),
                1 => char::from_u32((rng.next() % 0x80) as u32).unwrap_or('?'),
                _ => " */-,0123456789?@"
                    .chars()
                    .nth((rng.next() % 17) as usize)
                    .unwrap_or(' '),
            })
            .collect();
        if let Ok(s) = Schedule::parse(&spec) {
            let _ = s.next(start, &zone);
        }
    }
}
