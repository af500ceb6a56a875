use super::*;

#[test]
fn first_cpus_takes_one_cpu_per_worker_thread() {
    assert_eq!(first_cpus("0,1", 1), "0");
    assert_eq!(first_cpus("0,1", 2), "0,1");
    assert_eq!(first_cpus("0-3", 2), "0,1");
    assert_eq!(first_cpus("2,4-5", 4), "2,4,5");
    assert_eq!(first_cpus("0,1", 0), "0");
    assert_eq!(first_cpus("", 2), "");
    assert_eq!(first_cpus("x", 2), "x");
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

#[test]
fn the_raw_passthrough_runs_unless_left_out() {
    use clap::Parser;
    assert!(Cli::parse_from(["bench"]).bench.raw_passthrough);
    assert!(
        !Cli::parse_from(["bench", "--no-raw-passthrough"])
            .bench
            .raw_passthrough
    );
}

#[test]
fn median_of_even_and_odd_counts() {
    assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    assert_eq!(median(Vec::new()), 0.0);
}
