//! kbatch-cron: robfig/cron v3 `ParseStandard` semantics.
//!
//! INTERFACE STUB: `Schedule::parse` and `Schedule::next` are the contract.

/// A parse error; its `Display` is robfig's error text, which upstream validation embeds in
/// `spec.schedule: Invalid value: "<schedule>": <text>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// A parsed schedule (five fields or a descriptor, optionally with a TZ=/CRON_TZ= prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    _private: (),
}

impl Schedule {
    pub fn parse(_spec: &str) -> Result<Schedule, ParseError> {
        unimplemented!()
    }

    /// The first activation strictly after `after`, in the schedule's zone (from the TZ= prefix,
    /// else `default_zone`); `None` where robfig returns the zero time.
    pub fn next(
        &self,
        _after: jiff::Timestamp,
        _default_zone: &jiff::tz::TimeZone,
    ) -> Option<jiff::Timestamp> {
        unimplemented!()
    }
}
