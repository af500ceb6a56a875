//! Configuration: TOML file + `LOOPWATCH_<SECTION>__<KEY>` env overrides + CLI flags.
