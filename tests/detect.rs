//! Detection: the engine, `loopwatch scan`, `explain` and `replay` over the recorded
//! corpus, the trace-shape cases, the oracle scenarios, the framework conventions and
//! payload forms, presets, detection config and run keys, properties (seeded random inputs,
//! the fuzz targets on stable) and what run state costs in memory. Some tests also send
//! the same inputs through a server on loopback port 0 to compare the answers.
//!
//! Each file of `tests/detect/` is a module of this one test binary (one link per edit, not
//! one per file); `cargo test --test detect detect::NAME::` runs one file's tests. Shared
//! helpers are in `tests/support/`.

mod support;

mod detect {
    mod cases;
    mod cli_explain;
    mod conventions_corpus;
    mod corpus;
    mod custom_conventions;
    mod delegation_cost;
    mod detection_config;
    mod export_files;
    mod field;
    mod framework_shapes;
    mod fuzz_inputs;
    mod ignore_property;
    mod json_memory;
    mod loop_classes;
    mod mcp_server_hop;
    mod oracle_scenarios;
    mod payload_forms;
    mod presets;
    mod properties;
    mod recorded_frameworks;
    mod response_shapes;
    mod run_key;
    mod run_memory;
    mod scenarios;
    mod shapes_properties;
}
