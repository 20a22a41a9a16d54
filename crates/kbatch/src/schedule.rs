//! `kbatch schedule`: the next run times of a cron schedule, checked as the API server checks
//! a CronJob's schedule and time zone.

use std::process::ExitCode;

use clap::Args;
use jiff::Timestamp;
use jiff::tz::TimeZone;

#[derive(Args, Debug)]
pub struct ScheduleArgs {
    /// The schedule, as in a CronJob's spec.schedule (five fields or a descriptor).
    pub schedule: String,
    /// IANA time zone, as in spec.timeZone (default: this machine's zone).
    #[arg(long)]
    pub time_zone: Option<String>,
    /// How many run times to print.
    #[arg(short = 'n', default_value_t = 5)]
    pub count: usize,
    /// Start after this instant (RFC 3339), instead of now.
    #[arg(long)]
    pub from: Option<String>,
}

/// The lines to print, or the validation messages (exit 2).
pub fn next_times(args: &ScheduleArgs, now: Timestamp) -> Result<Vec<String>, Vec<String>> {
    let errs =
        kbatch_api::validation::schedule_and_time_zone(&args.schedule, args.time_zone.as_deref());
    if !errs.is_empty() {
        return Err(errs.iter().map(ToString::to_string).collect());
    }
    let from = match &args.from {
        None => now,
        Some(s) => s
            .parse::<Timestamp>()
            .map_err(|e| vec![format!("--from: {s:?} is not an RFC 3339 time: {e}")])?,
    };
    let zone = match &args.time_zone {
        None => TimeZone::system(),
        Some(name) => match kbatch_cron::load_location(name) {
            Ok(Some(tz)) => tz,
            Ok(None) => TimeZone::system(),
            Err(e) => return Err(vec![format!("spec.timeZone: {e}")]),
        },
    };
    let schedule = kbatch_cron::Schedule::parse(&args.schedule).map_err(|e| vec![e.to_string()])?;
    Ok(schedule
        .upcoming(from, &zone)
        .take(args.count)
        .map(|t| {
            t.to_zoned(zone.clone())
                .strftime("%Y-%m-%dT%H:%M:%S%:z")
                .to_string()
        })
        .collect())
}

pub fn run(args: &ScheduleArgs) -> ExitCode {
    match next_times(args, Timestamp::now()) {
        Ok(lines) => {
            if lines.is_empty() {
                // Valid, but robfig's search finds no activation (e.g. February 31st).
                eprintln!(
                    "{:?} never runs: no activation within five years",
                    args.schedule
                );
            }
            for l in lines {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(msgs) => {
            for m in msgs {
                eprintln!("{m}");
            }
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(schedule: &str, tz: Option<&str>, n: usize) -> ScheduleArgs {
        ScheduleArgs {
            schedule: schedule.into(),
            time_zone: tz.map(Into::into),
            count: n,
            from: None,
        }
    }

    #[test]
    fn prints_next_times_with_offsets() {
        let now: Timestamp = "2024-03-09T12:00:00Z".parse().unwrap();
        let out = next_times(&args("30 2 * * *", Some("America/New_York"), 3), now).unwrap();
        // 2024-03-10 02:30 does not exist in New York (spring forward): robfig skips that day.
        assert_eq!(
            out,
            [
                "2024-03-11T02:30:00-04:00",
                "2024-03-12T02:30:00-04:00",
                "2024-03-13T02:30:00-04:00"
            ]
        );
        let out = next_times(&args("@hourly", Some("UTC"), 2), now).unwrap();
        assert_eq!(
            out,
            ["2024-03-09T13:00:00+00:00", "2024-03-09T14:00:00+00:00"]
        );
    }

    #[test]
    fn rejects_like_the_api_server() {
        let now = Timestamp::UNIX_EPOCH;
        let e = next_times(&args("61 * * * *", None, 1), now).unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("spec.schedule: Invalid value: \"61 * * * *\": "),
            "{e:?}"
        );
        let e = next_times(&args("TZ=UTC * * * * *", None, 1), now).unwrap_err();
        assert!(
            e.iter()
                .any(|m| m.contains("cannot use TZ or CRON_TZ in schedule")),
            "{e:?}"
        );
        let e = next_times(&args("* * * * *", Some("Mars/Olympus"), 1), now).unwrap_err();
        assert_eq!(
            e,
            ["spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus"]
        );
        let mut a = args("* * * * *", None, 1);
        a.from = Some("yesterday".into());
        assert!(next_times(&a, now).is_err());
    }
}
