//! One integration-test binary. Most tests run the real `kiln` executable in temp dirs; some call
//! the library for what no command exposes (kept in step with `grep -n 'kiln::' tests/it/*.rs`):
//! fuzz.rs (the recipe loader, `when`, templates, units, host facts), image.rs (the wheel cache's
//! registry push and pull, `kiln::cache::WheelCache` and `kiln::oci`), step_cache_remote.rs
//! (`kiln::oci::Registry`), patch.rs (`patch::apply_with` with a writer that fails midway),
//! held_output.rs (`patch::site_packages_of` against an interpreter that holds its output),
//! state_dir.rs (`bench::append_history` and `read_baseline` on a full disk), spoof.rs (the
//! shipped signature sets and `serve::verdict::judge` on captured logs), report_html.rs (a
//! report built by hand to render every block), shipped.rs (the shipped recipes' names),
//! readme.rs (`kiln::cli::Cli` parses README's commands) and up_e2e.rs (the A/B's prompts);
//! several hash files with `kiln::hash`.

// Tests print diagnostics of what they ran; the lint is for the product.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// A scenario test reads top to bottom, setup to last assertion.
#![allow(clippy::too_many_lines)]

mod archive_safety;
mod baseline_launches;
mod bench;
mod bench_cli;
mod bounded_reads;
mod cache_perms;
mod coarse_clock;
mod common;
mod compile_progress;
mod cuda_step;
mod demo_build;
mod doctor;
mod engine;
mod faults;
mod fetch_extract;
mod fleet;
mod fresh_record;
mod fuzz;
mod gpu_replay;
mod held_output;
mod image;
mod image_names;
mod image_reader;
mod input_limits;
mod json_schema;
mod launch_preflight;
mod leads_with;
mod named_python;
mod net_deadlines;
mod non_utf8_paths;
mod oci_auth;
mod output_paths;
mod own_runs;
mod patch;
mod patch_journal;
mod patch_property;
mod patch_step;
mod pid_safety;
mod python_step;
mod readme;
mod receipts_index;
mod recipes;
mod report_html;
mod reporter;
mod secrets;
mod serve;
mod sglang_wire;
mod shell_help;
mod shipped;
mod sm120_sass;
mod spoof;
mod state_dir;
mod step_cache;
mod step_cache_forged;
mod step_cache_remote;
mod step_cache_stores;
mod step_cache_trust;
mod tune;
mod untrusted_text;
mod up_e2e;
mod up_outcome;
mod wheel_cache_safety;
mod wheel_cache_trust;
mod wheel_listing;
