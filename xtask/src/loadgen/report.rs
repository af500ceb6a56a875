//! The `bench` report as markdown: the machine, the command, the throughput matrix, the
//! worker-thread scaling cells, the latency step and the memory readings.

use std::fmt::Write;

use serde::Serialize;

use crate::loadgen::bench::{BenchReport, Row, Setup};
use crate::loadgen::latency::{Basis, LatencyRow};
use crate::loadgen::procfs::cpu_list;

/// The machine the figures come from.
#[derive(Debug, Serialize)]
pub struct Machine {
    /// Online CPUs (`processor` entries of `/proc/cpuinfo`, what `nproc` prints unpinned).
    pub cpus: usize,
    /// `model name` of the first CPU.
    pub cpu_model: String,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpus = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Machine {
            cpus,
            cpu_model,
            kernel,
        }
    }
}

/// Now, as RFC 3339 UTC to the second.
pub fn utc_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn thousands(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// The row of `setup` in the same cell as `row`.
fn setup_of<'a>(
    rows: impl IntoIterator<Item = &'a Row>,
    row: &Row,
    setup: Setup,
) -> Option<&'a Row> {
    rows.into_iter().find(|r| {
        r.setup == setup
            && r.cell.traffic == row.cell.traffic
            && r.cell.spans_per_request == row.cell.spans_per_request
            && r.cell.clients == row.cell.clients
            && r.cell.worker_threads == row.cell.worker_threads
            && r.cell.server_cpus == row.cell.server_cpus
    })
}

/// The pass-through row of the same cell as `row`.
fn passthrough_of<'a>(rows: &'a [Row], row: &Row) -> Option<&'a Row> {
    setup_of(rows, row, Setup::Passthrough)
}

/// `a / b` to two decimals, empty when `b` is 0 (the setup did not run).
fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        String::new()
    }
}

/// The one table: per closed-loop cell, spans per server CPU-second of every setup, and
/// loopwatch's against each (the prost pass-through, the raw pass-through as the floor of
/// this transport, rotel). Cells where loopwatch did not run are left out.
fn floor_table(out: &mut String, rows: &[&Row]) {
    out.push_str("Spans per server CPU-second; loopwatch ÷ each other setup in the same cell (×pass: the prost pass-through; ×raw: the raw pass-through, the transport's floor):\n\n");
    out.push_str("| traffic | spans/req | clients | loopwatch | prost pass-through | raw pass-through | rotel | ×pass | ×raw | ×rotel |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for row in rows.iter().filter(|r| r.setup == Setup::Loopwatch) {
        let per_cpu = |setup| {
            setup_of(rows.iter().copied(), row, setup)
                .map(|r| r.median.spans_per_cpu_second)
                .unwrap_or(0.0)
        };
        let shown = |v: f64| if v > 0.0 { thousands(v) } else { "–".into() };
        let lw = row.median.spans_per_cpu_second;
        let (pass, raw, rotel) = (
            per_cpu(Setup::Passthrough),
            per_cpu(Setup::RawPassthrough),
            per_cpu(Setup::Rotel),
        );
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.cell.traffic.label(),
            row.cell.spans_per_request,
            row.cell.clients,
            shown(lw),
            shown(pass),
            shown(raw),
            shown(rotel),
            ratio(lw, pass),
            ratio(lw, raw),
            ratio(lw, rotel)
        );
    }
    out.push_str("\nEvery measurement of the same run:\n\n");
}

fn cpus_label(cpus: &str) -> String {
    if cpus.is_empty() {
        "not pinned".into()
    } else {
        format!("CPU {cpus}")
    }
}

/// Whether a server pinned to `server` shares a CPU with the clients (`clients`); both
/// `taskset -c` lists, an empty server list (not pinned) shares every CPU.
fn shares_cpu(server: &str, clients: &str) -> bool {
    let (Some(server), Some(clients)) = (cpu_list(server), cpu_list(clients)) else {
        return false;
    };
    server.is_empty() || server.iter().any(|c| clients.contains(c))
}

/// The latency table: one row per setup and traffic, the added latency on loopwatch's.
fn latency_table(out: &mut String, r: &BenchReport) {
    let Some(first) = r.latency.first() else {
        return;
    };
    let _ = writeln!(
        out,
        "\nLatency at {:.0} % of loopwatch's maximum load (open loop):\n",
        100.0 * first.load_fraction
    );
    let max = match first.basis {
        Basis::ClosedLoop => "best closed-loop median spans/s",
        Basis::Cpu => {
            "best median spans per server CPU-second (the rate of a fully busy server CPU)"
        }
    };
    let _ = writeln!(
        out,
        "- Offered: {:.0} % of loopwatch's {max} for that traffic (\"max\": from the table above, or a closed-loop probe when it has no such row), the same rate for both setups, over {} senders (one connection and one request in flight each) paced by one shared schedule, {:.1} s per measurement, median of {} interleaved round(s); servers pinned as above, default worker threads.",
        100.0 * first.load_fraction,
        first.senders,
        r.latency_duration_seconds,
        r.rounds
    );
    out.push_str("- Latency: from each request's due time to its acknowledgement; a request that waited for a free sender counts the wait (no coordinated omission); one that left on time counts from its send (the client timer's ~1 ms wake-up slack is left out). Late: requests that left after their due time. Added: loopwatch minus pass-through at the same offered load. Achieved: acknowledged spans per second of sending (below the offer: the setup fell behind).\n\n");
    out.push_str("| traffic | spans/req | max spans/s | offered spans/s | setup | achieved spans/s | p50 ms | p99 ms | p999 ms | added p50 ms | added p99 ms | late | lost | refused |\n");
    out.push_str("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for row in &r.latency {
        let s = &row.median;
        let added = passthrough_latency(&r.latency, row)
            .filter(|_| row.setup != Setup::Passthrough && row.rounds > 0)
            .map(|p| {
                (
                    format!("{:+.2}", s.p50_ms - p.median.p50_ms),
                    format!("{:+.2}", s.p99_ms - p.median.p99_ms),
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {:.1} % | {} | {} |",
            row.traffic.label(),
            row.spans_per_request,
            thousands(row.loopwatch_max_spans_per_second),
            thousands(s.offered_spans_per_second),
            row.setup.name(),
            thousands(s.achieved_spans_per_second),
            s.p50_ms,
            s.p99_ms,
            s.p999_ms,
            added.0,
            added.1,
            s.late_percent,
            s.lost,
            s.refused
        );
    }
    for row in r
        .latency
        .iter()
        .filter(|row| row.rounds < r.rounds as usize)
    {
        let _ = writeln!(
            out,
            "\n{} in {} (latency): {} of {} rounds (a start failed).",
            row.setup.name(),
            row.traffic.label(),
            row.rounds,
            r.rounds
        );
    }
}

/// The pass-through latency row of the same traffic as `row`, when it has a round.
fn passthrough_latency<'a>(rows: &'a [LatencyRow], row: &LatencyRow) -> Option<&'a LatencyRow> {
    rows.iter().find(|r| {
        r.setup == Setup::Passthrough
            && r.traffic == row.traffic
            && r.spans_per_request == row.spans_per_request
            && r.rounds > 0
    })
}

/// Renders the report as markdown.
pub fn markdown(r: &BenchReport) -> String {
    let mut out = String::new();
    let m = &r.machine;
    let _ = writeln!(out, "### Run of {}\n", r.date);
    let _ = writeln!(
        out,
        "- Machine: {} CPUs, {}, Linux {}; load average {} before, {} after.",
        m.cpus, m.cpu_model, m.kernel, r.loadavg_before, r.loadavg_after
    );
    let _ = writeln!(out, "- Command: `{}`", r.command);
    let _ = writeln!(
        out,
        "- Each figure is the median of {} interleaved round(s) of {:.1} s per setup and cell; every server is a fresh process, pinned to {} (`taskset`), the clients and the counting sink run in this process on the other CPUs. Corpus traffic: {:.1} spans per request.",
        r.rounds,
        r.duration_seconds,
        cpus_label(&r.server_cpus),
        r.corpus_spans_per_request
    );
    let _ = writeln!(
        out,
        "- spans/s: spans at the sink per second, from the first send until the sink had every acknowledged span. Per CPU-s: spans at the sink per second of server CPU (utime + stime from `/proc/<pid>/stat`). ×pass: loopwatch or rotel per CPU-s ÷ pass-through per CPU-s. Latency: client send → acknowledgement. Lost: acknowledged spans that never reached the sink (sum over rounds). Refused: retryable refusals (each retried after 1 ms). Annotated: spans arriving with a `loop.*` attribute. Reports dropped: loopwatch's detections whose log line and signal it dropped with its report queue full (sum over rounds; its CPU is read once the queue is empty). Client CPU: CPU of the clients and sink per second of load (100 % = one CPU busy: then the clients, not the server, set spans/s).\n"
    );
    let (matrix, scaling): (Vec<&Row>, Vec<&Row>) = r
        .rows
        .iter()
        .partition(|row| row.cell.worker_threads.is_none());
    floor_table(&mut out, &matrix);
    out.push_str(
        "| traffic | spans/req | clients | setup | spans/s | per CPU-s | ×pass | p50 ms | p99 ms | lost | refused | annotated | reports dropped | client CPU |\n",
    );
    out.push_str("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for row in matrix {
        let s = &row.median;
        let ratio = passthrough_of(&r.rows, row)
            .map(|p| ratio(s.spans_per_cpu_second, p.median.spans_per_cpu_second))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} | {} | {:.0} % |",
            row.cell.traffic.label(),
            row.cell.spans_per_request,
            row.cell.clients,
            row.setup.name(),
            thousands(s.spans_per_second),
            thousands(s.spans_per_cpu_second),
            ratio,
            s.p50_ms,
            s.p99_ms,
            s.lost,
            s.refused,
            s.annotated,
            s.reports_dropped,
            s.client_cpu_percent
        );
    }
    for row in r.rows.iter().filter(|row| row.rounds < r.rounds as usize) {
        let _ = writeln!(
            out,
            "\n{} in {} ({:.0} spans/req, {} clients): {} of {} rounds (a start failed).",
            row.setup.name(),
            row.cell.traffic.label(),
            row.cell.spans_per_request,
            row.cell.clients,
            row.rounds,
            r.rounds
        );
    }
    if !scaling.is_empty() {
        let _ = writeln!(
            out,
            "\nWorker threads (corpus traffic): a server with n worker threads is pinned to n CPUs. The clients and the sink run on {}: a server on the same CPUs shares them with the clients (\"shared\"), so its spans/s is not a clean scaling figure; spans per server CPU-second still are.\n",
            cpus_label(&r.client_cpus)
        );
        out.push_str(
            "| setup | worker threads | server CPUs | clients | spans/s | per CPU-s | CPU-s used | p50 ms | p99 ms | lost | refused |\n",
        );
        out.push_str("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for row in scaling {
            let s = &row.median;
            let shared = if shares_cpu(&row.cell.server_cpus, &r.client_cpus) {
                " (shared)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "| {} | {} | {}{} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} |",
                row.setup.name(),
                row.cell.worker_threads.unwrap_or(0),
                cpus_label(&row.cell.server_cpus),
                shared,
                row.cell.clients,
                thousands(s.spans_per_second),
                thousands(s.spans_per_cpu_second),
                s.cpu_seconds,
                s.p50_ms,
                s.p99_ms,
                s.lost,
                s.refused
            );
        }
    }
    latency_table(&mut out, r);
    if !r.memory.is_empty() {
        out.push_str("\nResident memory (`VmRSS`), idle and after one-call runs (1000 traces per request):\n\n");
        out.push_str("| setup | idle MiB | runs sent | MiB after | bytes per run | lost |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|\n");
        for m in &r.memory {
            let per_run = m.loaded_rss_bytes.saturating_sub(m.idle_rss_bytes) / m.runs.max(1);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                m.setup.name(),
                mib(m.idle_rss_bytes),
                m.runs,
                mib(m.loaded_rss_bytes),
                per_run,
                m.lost
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(setup: Setup, traffic: crate::loadgen::bench::Traffic, per_cpu: f64) -> Row {
        Row {
            cell: crate::loadgen::bench::Cell {
                traffic,
                spans_per_request: 1000.0,
                clients: 4,
                server_cpus: "0".into(),
                worker_threads: None,
                runs: 0,
                setups: Vec::new(),
            },
            setup,
            rounds: 3,
            median: crate::loadgen::bench::Sample {
                spans_per_cpu_second: per_cpu,
                ..Default::default()
            },
        }
    }

    #[test]
    fn the_floor_table_puts_each_setup_of_a_cell_beside_loopwatch() {
        use crate::loadgen::bench::Traffic::{LoopHeavy, NoLoops};
        let rows = [
            row(Setup::Loopwatch, NoLoops, 300_000.0),
            row(Setup::Passthrough, NoLoops, 400_000.0),
            row(Setup::RawPassthrough, NoLoops, 1_500_000.0),
            row(Setup::Loopwatch, LoopHeavy, 200_000.0),
            row(Setup::Passthrough, LoopHeavy, 250_000.0),
        ];
        let mut out = String::new();
        floor_table(&mut out, &rows.iter().collect::<Vec<_>>());
        let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(
            lines[1],
            format!(
                "| {} | 1000 | 4 | 300.0 k | 400.0 k | 1500.0 k | – | 0.75 | 0.20 |  |",
                NoLoops.label()
            )
        );
        assert_eq!(
            lines[2],
            format!(
                "| {} | 1000 | 4 | 200.0 k | 250.0 k | – | – | 0.80 |  |  |",
                LoopHeavy.label()
            )
        );
    }

    #[test]
    fn servers_share_cpus_with_clients_on_overlap_or_unpinned() {
        assert!(!shares_cpu("0", "1"));
        assert!(shares_cpu("0,1", "1"));
        assert!(shares_cpu("0-1", "0-1"));
        assert!(shares_cpu("", "1"));
        assert!(!shares_cpu("0", ""));
    }
}
