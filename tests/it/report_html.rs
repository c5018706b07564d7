//! report.html in a real browser: headless Chromium loads the page, takes a screenshot that must
//! not be blank, and logs no console error. `assert_renders_in_chromium` also checks the real
//! report of the end-to-end `kiln up` (up_e2e).

use std::io::Read;
use std::path::Path;
use std::process::Command;

/// Load `html` in headless Chromium: no console errors, and a screenshot with real content.
pub(crate) fn assert_renders_in_chromium(html: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let shot = dir.path().join("shot.png");
    let url = format!("file://{}", html.display());
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            // Tall enough for the whole report: a run with more warnings (a loaded box) pushed
            // the bench plot below a 1400-pixel window (session 18).
            "--window-size=1024,3000",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .expect("chromium runs (bash .ci/install-deps installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {stderr}");
    let console: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(console.is_empty(), "console errors: {console:#?}");
    // To look at it: KILN_REPORT_SHOT=/tmp/report.png cargo test --test it report_html::
    if let Some(keep) = std::env::var_os("KILN_REPORT_SHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    let (width, height, pixels) = decode_png(&std::fs::read(&shot).unwrap());
    assert_eq!((width, height), (1024, 3000));
    let white = pixels.iter().filter(|p| **p == [255, 255, 255]).count();
    let inked = pixels.len() - white;
    // Text, table borders and the plot's bars: a blank or failed page has (almost) none (at
    // least 0.5 % of a 1024×1400 screen's pixels, however long the page).
    assert!(
        inked > 1024 * 1400 / 200,
        "the screenshot is (nearly) blank: {inked} of {} pixels not white",
        pixels.len()
    );
    // The plot's bars are the report's blue (#4c78a8): the inline SVG rendered.
    let has_svg = html_text(html).contains("<svg");
    if has_svg {
        assert!(
            pixels.contains(&[0x4c, 0x78, 0xa8]),
            "the bench plot's bars are not on the screenshot"
        );
    }
    // The ceiling's line is the report's green (#54a24b), drawn where there is one.
    if html_text(html).contains("<line class=\"ceiling\"") {
        assert!(
            pixels.contains(&[0x54, 0xa2, 0x4b]),
            "the plot's ceiling line is not on the screenshot"
        );
    }
    let dom = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile2").display()
        ))
        .arg(&url)
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("Tuning verdicts"), "{dom}");
}

fn html_text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// RGB pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes).
fn decode_png(bytes: &[u8]) -> (usize, usize, Vec<[u8; 3]>) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut at, mut idat) = (8, Vec::new());
    let (mut width, mut height, mut channels) = (0, 0, 0);
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let data = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
                height = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                assert_eq!(data[8], 8, "8-bit samples");
                channels = match data[9] {
                    2 => 3,
                    6 => 4,
                    t => panic!("colour type {t}"),
                };
                assert_eq!(data[12], 0, "not interlaced");
            }
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        at += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .unwrap();
    let stride = width * channels;
    let mut prev = vec![0u8; stride];
    let mut pixels = Vec::with_capacity(width * height);
    for row in raw.chunks(stride + 1).take(height) {
        let (filter, line) = (row[0], &row[1..]);
        let mut cur = vec![0u8; stride];
        for i in 0..stride {
            let a = if i >= channels { cur[i - channels] } else { 0 };
            let (b, c) = (prev[i], if i >= channels { prev[i - channels] } else { 0 });
            let predict = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => u16::midpoint(u16::from(a), u16::from(b)) as u8,
                4 => paeth(a, b, c),
                f => panic!("filter {f}"),
            };
            cur[i] = line[i].wrapping_add(predict);
        }
        pixels.extend(cur.chunks(channels).map(|p| [p[0], p[1], p[2]]));
        prev = cur;
    }
    (width, height, pixels)
}

fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let p = i16::from(a) + i16::from(b) - i16::from(c);
    let (pa, pb, pc) = (
        (p - i16::from(a)).abs(),
        (p - i16::from(b)).abs(),
        (p - i16::from(c)).abs(),
    );
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}

/// A report as `kiln up` builds it (a real greedy comparison, a bench report as JSON), written
/// by the report's own writer, rendered by Chromium.
#[test]
fn the_html_report_renders_in_headless_chromium_without_errors() {
    let tokens = |s: &str| kiln::bench::ab::Output::of_ids(&s.split(' ').collect::<Vec<_>>());
    let baseline = vec![tokens("a b c d"), tokens("x y z")];
    let candidate = vec![tokens("a b c d"), tokens("x y w")];
    let runs: Vec<serde_json::Value> = [1.0_f64, 2.0, 3.0]
        .iter()
        .map(|s| {
            serde_json::json!({
                "tokens": 64, "prompt_tokens": 8, "ttft_s": 0.01, "e2e_s": s,
                "e2e_tok_s": 64.0 / s, "decode_tok_s": 70.0 / s, "server_decode_tok_s": null,
                "accept_length": null})
        })
        .collect();
    let bench: kiln::bench::Report = serde_json::from_value(serde_json::json!({
        "url": "http://127.0.0.1:8080", "api": "openai", "max_tokens": 64, "unix_time": 1,
        "fingerprint": {"gpu": "no GPU", "driver": "-", "server": "llama-server",
                        "model": "tiny", "server_args": "-c 512"},
        "fingerprint_id": "abc123",
        "runs": runs,
        "e2e_tok_s": {"median": 32.0, "mean": 35.0, "min": 21.0, "max": 64.0, "cv": 0.5},
        "decode_tok_s": {"median": 35.0, "mean": 38.0, "min": 23.0, "max": 70.0, "cv": 0.5},
        "ttft_ms": {"median": 10.0, "mean": 10.0, "min": 10.0, "max": 10.0, "cv": 0.0},
        "accept_length": null, "warnings": ["<script>alert(1)</script> stays text"], "gate": null
    }))
    .unwrap();
    let report = kiln::pipeline::Report {
        recipe: "demo".into(),
        stage: None,
        served: Some(kiln::pipeline::Served {
            profile: "tuned".into(),
            url: Some("http://127.0.0.1:8080".into()),
            pid: 42,
            ready_after_s: 1.5,
            verdicts: vec![kiln::serve::verdict::Verdict {
                feature: "flash-attn".into(),
                status: kiln::serve::verdict::Status::Active,
                reason: "`--flash-attn` kernel in use".into(),
                evidence: Some("log: flash_attn = 1 <&>".into()),
            }],
            baseline: Some("baseline".into()),
            ab: Some(kiln::bench::ab::compare(&baseline, &candidate, 2)),
            bench: Some(bench),
            launches: Vec::new(),
            ceiling: Some(kiln::pipeline::Ceiling {
                source: "llama-bench",
                path: "/s/work/demo/llama-bench.json".into(),
                figure: Some(kiln::pipeline::Figure {
                    test: "tg2048".into(),
                    n_gen: 2048,
                    tok_s: 80.0,
                    stddev_tok_s: 0.5,
                }),
                served_decode_tok_s: Some(35.0),
                ratio: Some(35.0 / 80.0),
                skipped: None,
            }),
        }),
        strict: false,
        outcome: kiln::pipeline::Outcome {
            ok: true,
            error: None,
            warnings: vec!["bench: <b>noisy</b> stays text".into()],
            hint: None,
        },
        exit_code: 0,
        header: Some(kiln::pipeline::Header {
            unix_time: 1_764_600_000,
            kiln_version: "0.1.0".into(),
            host: "h200-box".into(),
            gpus: vec!["NVIDIA H200 (cc 9.0, driver 570.86)".into()],
            recipe_origin: "recipes/demo.toml".into(),
            profile: Some("tuned".into()),
            steps: vec![
                kiln::pipeline::StepLine {
                    id: "fetch".into(),
                    kind: "fetch".into(),
                    status: "done in 1.2s".into(),
                    log: Some("../../runs/demo/logs/fetch.log".into()),
                },
                kiln::pipeline::StepLine {
                    id: "build".into(),
                    kind: "run".into(),
                    status: "not done".into(),
                    log: None,
                },
                // As Header::of words a step whose `when` is false: its code span is <code>.
                kiln::pipeline::StepLine {
                    id: "llama-bench".into(),
                    kind: "run".into(),
                    status: "skipped (`when = \"var.llama_bench == on\"` is false on this host)"
                        .into(),
                    log: None,
                },
            ],
        }),
    };
    let ws = tempfile::tempdir().unwrap();
    let paths = kiln::paths::StatePaths::new(ws.path().to_path_buf(), None);
    let files = report.write(&paths).unwrap();
    let html = std::fs::read_to_string(&files.html).unwrap();
    assert!(html.contains("&lt;script&gt;") && !html.contains("<script>"));
    assert!(html.contains("warning: bench: &lt;b&gt;noisy"), "{html}");
    assert!(html.contains("<svg") && html.contains("Greedy A/B"));
    // The plot draws llama-bench's ceiling beside the runs: a labelled line in the SVG.
    let svg = &html[html.find("<svg").unwrap()..html.find("</svg>").unwrap()];
    assert!(
        svg.contains("<line class=\"ceiling\"")
            && svg.contains(">ceiling: llama-bench tg2048 80.0 tok/s</text>"),
        "{svg}"
    );
    // The header, the step summary with its log link, code spans, and tables, not terminal text.
    for part in [
        "<th>date</th><td>2025-12-01 14:40 UTC</td>",
        "<th>kiln</th><td>0.1.0</td>",
        "NVIDIA H200 (cc 9.0, driver 570.86)",
        "<th>recipe</th><td>recipes/demo.toml</td>",
        "<th>profile</th><td>tuned</td>",
        "<a href=\"../../runs/demo/logs/fetch.log\">log</a>",
        "<code>--flash-attn</code> kernel in use",
        "skipped (<code>when = &quot;var.llama_bench == on&quot;</code> is false on this host)",
        "<th>agreeing tokens</th>",
        "<th>decode tok/s</th>",
    ] {
        assert!(html.contains(part), "{part} missing:\n{html}");
    }
    assert!(!html.contains("<pre>") && !html.contains('`'), "{html}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files.json).unwrap()).unwrap();
    for key in [
        "recipe",
        "profile",
        "url",
        "pid",
        "ready_after_s",
        "verdicts",
        "ab",
        "bench",
        "outcome",
        "exit_code",
    ] {
        assert!(!json[key].is_null(), "report.json keeps `{key}`: {json}");
    }
    assert_renders_in_chromium(&files.html);
}
