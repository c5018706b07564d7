//! Pins of the state directory's layout (issue 48's mutation run): every path `StatePaths`
//! builds, as docs/architecture.md lays it out. A later kiln finds what an earlier one wrote
//! only where the layout stays put, so each getter is pinned, not only a sample.

use super::*;

#[test]
fn every_path_of_the_state_and_cache_directories_is_the_documented_one() {
    let p = StatePaths::new(PathBuf::from("/s"), Some(PathBuf::from("/c")));
    let want: [(PathBuf, &str); 27] = [
        (p.root().to_path_buf(), "/s"),
        (p.cache().to_path_buf(), "/c"),
        (p.runs(), "/s/runs"),
        (p.run_dir("r"), "/s/runs/r"),
        (p.receipts("r"), "/s/runs/r/receipts"),
        (p.receipt("r", "a"), "/s/runs/r/receipts/a.json"),
        (p.receipts_index("r"), "/s/runs/r/receipts.idx"),
        (p.step_log("r", "a"), "/s/runs/r/logs/a.log"),
        (p.recipe_cache(), "/s/recipe-cache"),
        (p.hash_memo(), "/s/hashmemo.json"),
        (p.lock(), "/s/lock"),
        (p.clock_granularity(), "/s/clock-granularity"),
        (p.work("r"), "/s/work/r"),
        (p.shipped(), "/s/shipped"),
        (p.serve_dir(), "/s/serve"),
        (p.serve_record("r"), "/s/serve/r.json"),
        (p.serve_log("r", "fast"), "/s/serve/r-fast.log"),
        (p.reports("r"), "/s/reports/r"),
        (p.tune("r"), "/s/tune/r"),
        (p.bench(), "/s/bench"),
        (p.patches(), "/s/patches"),
        (p.running(), "/s/running"),
        (p.downloads(), "/c/downloads"),
        (p.download("AB12"), "/c/downloads/ab12"),
        (p.wheels(), "/c/wheels"),
        (p.steps(), "/c/steps"),
        (p.tool("uv"), "/c/tools/uv"),
    ];
    for (got, want) in want {
        assert_eq!(got, Path::new(want));
    }
    assert_eq!(p.python_facts(), Path::new("/c/python-facts"));
}
