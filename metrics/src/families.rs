//! The metric families both processes keep: tool calls by tool and status
//! with their latency, and gauges that count how often a value occurs now
//! (environments by backend, workers by state).

use std::collections::BTreeMap;
use std::hash::Hash;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::latency_histogram;

/// The tool label of a call naming a tool the process does not serve, so the
/// label sets stay bounded whatever names clients send.
pub const UNKNOWN_TOOL: &str = "(unknown)";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

/// A name and help text of one metric.
#[derive(Clone, Copy, Debug)]
pub struct Described<'a> {
    pub name: &'a str,
    pub help: &'a str,
}

/// Finished tool calls (`{tool, status}` counter) and their wall time
/// (`{tool}` histogram with [`crate::LATENCY_BUCKETS`]).
#[derive(Clone, Debug)]
pub struct ToolCalls {
    calls: Family<CallLabels, Counter>,
    duration: Family<ToolLabel, Histogram, fn() -> Histogram>,
}

impl ToolCalls {
    /// Both families, registered in `registry` under `calls` and `duration`.
    pub fn register(
        registry: &mut Registry,
        calls: Described<'_>,
        duration: Described<'_>,
    ) -> Self {
        let family = ToolCalls {
            calls: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
        };
        registry.register(calls.name, calls.help, family.calls.clone());
        registry.register(duration.name, duration.help, family.duration.clone());
        family
    }

    /// One finished call of `tool` (a served tool's name or [`UNKNOWN_TOOL`]).
    pub fn record(&self, tool: &str, status: &'static str, duration: Duration) {
        self.calls
            .get_or_create(&CallLabels {
                tool: tool.to_owned(),
                status,
            })
            .inc();
        self.duration
            .get_or_create(&ToolLabel {
                tool: tool.to_owned(),
            })
            .observe(duration.as_secs_f64());
    }
}

/// Sets `family` to the number of times each value occurs in `values`; a
/// value no longer seen disappears from the exposition.
pub fn set_counts<L>(
    family: &Family<L, Gauge>,
    values: impl IntoIterator<Item = String>,
    label: impl Fn(String) -> L,
) where
    L: Clone + Hash + Eq,
{
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for value in values {
        *counts.entry(value).or_default() += 1;
    }
    family.clear();
    for (value, count) in counts {
        family.get_or_create(&label(value)).set(gauge_value(count));
    }
}

/// A count as a gauge's value.
pub fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}
