//! Fuzz harnesses for kbatch's API input handling. The pipelines live in `pipelines.rs` so the
//! stable test suite can replay the corpus through the same code; what needs crates the API
//! server does not depend on (the cron walker) lives here.

pub mod pipelines;

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// `cron` beyond the API: parse the schedule directly and walk its next activations from
/// instants chosen to stress the walker (DST changes, leap days, the ends of jiff's range).
pub fn cron(data: &[u8]) {
    pipelines::cron(data);
    let Some((spec, tz)) = pipelines::cron_parts(data) else {
        return;
    };
    let _ = kbatch_cron::has_tz_prefix(spec);
    let _ = kbatch_cron::load_location(spec);
    let zone = tz
        .and_then(|tz| kbatch_cron::load_location(tz).ok().flatten())
        .unwrap_or(TimeZone::UTC);
    let Ok(schedule) = kbatch_cron::Schedule::parse(spec) else {
        return;
    };
    let _ = schedule.location();
    let _ = schedule.constant_delay();
    let zones = [
        zone,
        TimeZone::UTC,
        TimeZone::get("America/New_York").unwrap_or(TimeZone::UTC),
        TimeZone::get("Australia/Lord_Howe").unwrap_or(TimeZone::UTC),
    ];
    let afters = [
        Timestamp::from_second(1_772_953_199).unwrap_or(Timestamp::UNIX_EPOCH), // 2026-03-08 06:59:59Z
        Timestamp::from_second(1_709_164_800).unwrap_or(Timestamp::UNIX_EPOCH), // 2024-02-29
        Timestamp::UNIX_EPOCH,
        Timestamp::MIN,
        Timestamp::MAX,
        Timestamp::MAX - jiff::SignedDuration::from_hours(24 * 366 * 5),
    ];
    for z in &zones {
        for after in afters {
            let _ = schedule.next(after, z);
        }
        // Each activation fed back in; a stuck walker shows up as a libFuzzer timeout.
        let _ = schedule.upcoming(afters[0], z).take(5).count();
    }
}
