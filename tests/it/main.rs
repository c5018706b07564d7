//! One integration-test binary: every test runs the real `kiln` executable in a temp dir.

// Tests print diagnostics of what they ran; the lint is for the product.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// A scenario test reads top to bottom, setup to last assertion.
#![allow(clippy::too_many_lines)]

mod archive_safety;
mod bench;
mod common;
mod cuda_step;
mod doctor;
mod engine;
mod faults;
mod fetch_extract;
mod fleet;
mod fresh_record;
mod fuzz;
mod gpu_replay;
mod image;
mod input_limits;
mod net_deadlines;
mod patch;
mod patch_step;
mod python_step;
mod receipts_index;
mod recipes;
mod report_html;
mod reporter;
mod serve;
mod shell_help;
mod shipped;
mod tune;
mod up_e2e;
mod up_outcome;
