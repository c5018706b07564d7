//! The launch preflight: a profile's resolved command line against this host, before anything
//! is provisioned or loaded. GPU count against tensor × pipeline (× data) parallelism, a mixed
//! tensor-parallel group, the quantization against the GPU's compute capability, the model and
//! draft checkpoints, their weights against free GPU memory, flags the server does not know,
//! the port, and disk for JIT caches. Facts only: nvidia-smi's answer, files, `--help` of a
//! built llama-server; nothing imports torch.

mod dataclass_flags;
pub(crate) mod flags;
pub(crate) mod preflight;
pub(crate) mod table;
pub(crate) mod weights;

#[cfg(test)]
mod count_tests;
#[cfg(test)]
mod pins;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Check, Status};
use crate::host::Gpu;
use flags::Args;
use table::Server;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// Weights above this share of the group's free memory cannot load: the rest goes to the CUDA
/// context, NCCL buffers and activations (kiln's margin, stated in every weights line).
pub(crate) const FIT_SHARE: f64 = 0.95;
/// Weights above this share leave under 15% for the KV cache: a warning.
pub(crate) const KV_SHARE: f64 = 0.85;
/// Free space below these for JIT caches: a failure, a warning (kiln's margins).
const JIT_FAIL: u64 = GIB;
const JIT_WARN: u64 = 5 * GIB;

/// The ids of the launch checks, in the order they are shown.
pub(crate) const IDS: [&str; 10] = [
    "launch.server",
    "launch.gpus",
    "launch.gpu-group",
    "launch.quantization",
    "launch.model",
    "launch.draft-model",
    "launch.weights",
    "launch.flags",
    "launch.port",
    "launch.jit-disk",
];

/// How a check's summary ends when a value only the user can give is missing (`--set model=PATH`).
pub(crate) const NO_VALUE: &str = "which has no value";

/// One profile, resolved: what it would launch.
pub(crate) struct Launch<'a> {
    pub recipe: &'a str,
    pub profile: &'a str,
    pub cmd: &'a [String],
    pub args: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub port: Option<u16>,
    /// Text standing for a variable without a value (`<unset:model>`), and the variable.
    pub unset: &'a [(String, String)],
    /// Paths a step of the recipe makes (its `check` paths, its venv), with the step's id.
    pub made_by: &'a [(PathBuf, String)],
    /// The SGLang version a python step of the recipe pins (`sglang==0.5.9`).
    pub pinned_sglang: Option<&'a str>,
    /// The recipe has a `tp` variable (`--set tp=N` retargets it).
    pub tp_var: bool,
    /// The recipe has a `port` variable (`--set port=N` moves the server).
    pub port_var: bool,
}

/// The host's side: GPUs as nvidia-smi lists them, and what else the checks read.
pub(crate) struct Host<'a> {
    pub gpus: &'a [Gpu],
    /// kiln's own `CUDA_VISIBLE_DEVICES` (a profile's `env` wins over it).
    pub cuda_visible: Option<&'a str>,
    /// This recipe's recorded server, alive: (profile, pid).
    pub own_server: Option<(&'a str, u32)>,
    pub home: Option<&'a Path>,
    pub ram_available: Option<u64>,
}

fn gib(bytes: u64) -> String {
    crate::units::format_size(bytes)
}

impl Launch<'_> {
    fn unset_in(&self, value: &str) -> Option<&str> {
        self.unset
            .iter()
            .find(|(p, _)| value.contains(p.as_str()))
            .map(|(_, v)| v.as_str())
    }

    fn made_by(&self, path: &Path) -> Option<&str> {
        crate::recipe::maker(self.made_by, path)
    }

    fn env_or<'h>(&'h self, key: &str, host: Option<&'h str>) -> Option<&'h str> {
        self.env.get(key).map(String::as_str).or(host)
    }
}

/// Every launch check of one profile.
pub(crate) fn check(l: &Launch, h: &Host) -> Vec<Check> {
    let Some(server) = table::server_of(l.cmd) else {
        let what = l.cmd.first().map_or("(no cmd)", String::as_str);
        let mut out = vec![Check::skip(
            "launch.server",
            format!("kiln does not know the server `{what}`: only its port is checked"),
        )];
        out.push(port(l, h, None));
        return tag(l, out);
    };
    let args = Args::parse(l.args);
    let visible = visible(h.gpus, l.env_or("CUDA_VISIBLE_DEVICES", h.cuda_visible));
    let need = gpus_needed(server, &args);
    let group: Vec<&Gpu> = visible
        .gpus
        .iter()
        .copied()
        .take(need.count.max(1) as usize)
        .collect();
    let model = checkpoint(l, server, &args, server.model, "launch.model", "model");
    let draft = checkpoint(
        l,
        server,
        &args,
        server.draft,
        "launch.draft-model",
        "draft model",
    );
    let out = vec![
        gpu_count(l, server, &args, &need, &visible),
        gpu_group(server, &need, &group),
        quantization(server, &args, &model, &group),
        model.check.clone(),
        draft.check.clone(),
        // llama-server splits layers over every visible GPU; SGLang loads onto its group.
        fit(
            server,
            &args,
            &model,
            &draft,
            if server.tp.is_empty() {
                &visible.gpus
            } else {
                &group
            },
            h,
        ),
        known_flags(l, server, &args),
        port(l, h, Some(&args)),
        jit_disk(l, server, h),
    ];
    tag(l, out)
}

fn tag(l: &Launch, checks: Vec<Check>) -> Vec<Check> {
    checks
        .into_iter()
        .map(|mut c| {
            c.profile = Some(l.profile.to_string());
            c
        })
        .collect()
}

/// The GPUs a process sees: all of them, or those `CUDA_VISIBLE_DEVICES` names (indices or
/// UUID prefixes; CUDA stops at the first entry it cannot match).
pub(crate) struct Visible<'g> {
    pub gpus: Vec<&'g Gpu>,
    pub cvd: Option<String>,
}

pub(crate) fn visible<'g>(gpus: &'g [Gpu], cvd: Option<&str>) -> Visible<'g> {
    let Some(cvd) = cvd else {
        return Visible {
            gpus: gpus.iter().collect(),
            cvd: None,
        };
    };
    let mut out: Vec<&Gpu> = Vec::new();
    for token in cvd.split(',').map(str::trim) {
        let found = match token.parse::<u32>() {
            Ok(i) => gpus.iter().find(|g| g.index == i),
            Err(_) if token.starts_with("GPU-") => gpus
                .iter()
                .find(|g| g.uuid.as_deref().is_some_and(|u| u.starts_with(token))),
            Err(_) => None,
        };
        match found {
            Some(g) if !out.iter().any(|o| o.index == g.index) => out.push(g),
            _ => break,
        }
    }
    Visible {
        gpus: out,
        cvd: Some(cvd.to_string()),
    }
}

/// GPUs one node needs: tp × pp × dp (dp inside tp with DP attention) ÷ nodes.
struct Need {
    count: u64,
    tp: u64,
    how: String,
}

fn gpus_needed(server: &Server, args: &Args) -> Need {
    let tp = args.number(server.tp).unwrap_or(1).max(1);
    let pp = args.number(server.pp).unwrap_or(1).max(1);
    let dp_flag = args.number(server.dp).unwrap_or(1).max(1);
    let dp = if args.has(server.dp_inside_tp) {
        1
    } else {
        dp_flag
    };
    let nodes = args.number(server.nnodes).unwrap_or(1).max(1);
    let count = (tp * pp * dp).div_ceil(nodes);
    let mut how = format!("tp {tp}");
    if pp > 1 {
        how.push_str(&format!(" × pp {pp}"));
    }
    if dp > 1 {
        how.push_str(&format!(" × dp {dp}"));
    } else if dp_flag > 1 {
        how.push_str(&format!(" (dp {dp_flag} inside tp: DP attention)"));
    }
    if nodes > 1 {
        how.push_str(&format!(" ÷ {nodes} nodes"));
    }
    Need { count, tp, how }
}

fn describe(gpus: &[&Gpu]) -> String {
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for g in gpus {
        let k = format!("{} (cc {}, {} MiB)", g.name, g.compute_cap, g.memory_mib);
        match kinds.iter_mut().find(|(n, _)| *n == k) {
            Some((_, c)) => *c += 1,
            None => kinds.push((k, 1)),
        }
    }
    kinds
        .iter()
        .map(|(k, c)| format!("{c}× {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn gpu_count(l: &Launch, server: &Server, args: &Args, need: &Need, v: &Visible) -> Check {
    let id = "launch.gpus";
    let seen = v.gpus.len() as u64;
    let shown = match &v.cvd {
        Some(cvd) => format!("{seen} visible (CUDA_VISIBLE_DEVICES={cvd})"),
        None if seen == 0 => "no NVIDIA GPU visible (nvidia-smi lists none or is missing)".into(),
        None => format!("{seen} visible"),
    };
    if server.tp.is_empty() {
        // llama-server: GPUs only matter when it offloads layers.
        let layers = args.value(server.gpu_layers);
        return match layers {
            Some(n) if n != "0" && seen == 0 => Check::fail(
                id,
                format!(
                    "the profile offloads layers to a GPU ({} {n}) but {shown}",
                    server.gpu_layers[0]
                ),
            )
            .fix("serve on a host with an NVIDIA GPU, or use the CPU demo: kiln up tiny-cpu"),
            Some(n) if n != "0" => Check::pass(
                id,
                format!(
                    "{} {n}: offloads to {} ({})",
                    server.gpu_layers[0],
                    shown,
                    describe(&v.gpus)
                ),
            ),
            _ => Check::skip(
                id,
                format!(
                    "{} serves from the CPU (no {})",
                    server.name, server.gpu_layers[0]
                ),
            ),
        };
    }
    if need.count <= seen {
        return Check::pass(
            id,
            format!(
                "{} needs {} GPU(s); {shown}: {}",
                need.how,
                need.count,
                describe(&v.gpus)
            ),
        );
    }
    let tp_flag = args
        .pairs
        .iter()
        .rev()
        .find(|(f, _)| server.tp.contains(f))
        .map_or(server.tp[0], |(f, _)| *f);
    let mut fix = Vec::new();
    if seen > 0 && l.tp_var && need.count / need.tp.max(1) <= seen {
        let tp = (seen / (need.count / need.tp.max(1)).max(1)).max(1);
        fix.push(format!("`--set tp={tp}` to fit {seen} GPU(s)"));
    }
    if v.cvd.is_some() && (v.gpus.len() as u64) < need.count {
        fix.push("widen CUDA_VISIBLE_DEVICES".into());
    }
    fix.push("run it on a host with enough GPUs".into());
    Check::fail(
        id,
        format!(
            "{tp_flag} {} ({}) needs {} GPU{}; {shown}{}",
            need.tp,
            need.how,
            need.count,
            if need.count == 1 { "" } else { "s" },
            if v.gpus.is_empty() {
                String::new()
            } else {
                format!(": {}", describe(&v.gpus))
            }
        ),
    )
    .fix(fix.join(", or "))
}

fn gpu_group(server: &Server, need: &Need, group: &[&Gpu]) -> Check {
    let id = "launch.gpu-group";
    if server.tp.is_empty() || need.tp < 2 || group.len() < 2 {
        return Check::skip(id, "no tensor-parallel group of two or more GPUs");
    }
    let first = group[0];
    if group
        .iter()
        .any(|g| g.name != first.name || g.memory_mib != first.memory_mib)
    {
        return Check::warn(
            id,
            format!("mixed GPUs in one tensor-parallel group: {}: every rank runs at the pace and memory of the smallest", describe(group)),
        )
        .fix("select identical GPUs with CUDA_VISIBLE_DEVICES (the profile's `env` or kiln's)");
    }
    let free: Vec<u64> = group.iter().map(|g| free_bytes(g)).collect();
    let (min, max) = (
        free.iter().copied().min().unwrap_or(0),
        free.iter().copied().max().unwrap_or(0),
    );
    if (min as f64) < max as f64 * 0.9 {
        let busy = group
            .iter()
            .zip(&free)
            .filter(|(_, f)| **f == min)
            .map(|(g, _)| g.index.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return Check::warn(
            id,
            format!("free memory differs within the group ({} to {}; GPU {busy} is in use): SGLang logs \"The memory capacity is unbalanced\" (an error with SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK) and sizes every rank by the smallest", gib(min), gib(max)),
        )
        .fix("stop what runs on those GPUs (nvidia-smi lists it), or select others with CUDA_VISIBLE_DEVICES");
    }
    Check::pass(
        id,
        format!("{}: one model, one memory size", describe(group)),
    )
}

fn free_bytes(g: &Gpu) -> u64 {
    g.memory_mib.saturating_sub(g.memory_used_mib.unwrap_or(0)) * MIB
}

/// A model or draft argument, judged.
#[derive(Clone)]
struct Checkpoint {
    check: Check,
    /// The local path, when it exists.
    path: Option<PathBuf>,
}

fn checkpoint(
    l: &Launch,
    server: &Server,
    args: &Args,
    names: &[&str],
    id: &'static str,
    what: &str,
) -> Checkpoint {
    let none = |check| Checkpoint { check, path: None };
    if names.is_empty() {
        return none(Check::skip(id, format!("{} takes no {what}", server.name)));
    }
    let Some(value) = args.value(names) else {
        return none(if id == "launch.model" && server.model_is_dir {
            Check::fail(
                id,
                format!("no {} flag: {} needs a model", names[0], server.name),
            )
            .fix(format!("add `{} PATH` to the profile's args", names[0]))
        } else {
            Check::skip(id, format!("no {what} ({} not given)", names[0]))
        });
    };
    if let Some(var) = l.unset_in(value) {
        return none(
            Check::fail(id, format!("{} comes from `${{{var}}}`, {NO_VALUE}", names[0]))
                .fix(format!("pass `--set {var}=PATH` (a local checkpoint directory); `kiln up` with `--no-serve` provisions without it")),
        );
    }
    let path = PathBuf::from(value);
    if !path.exists() {
        if let Some(step) = l.made_by(&path) {
            return none(Check::skip(
                id,
                format!("{value} is made by step `{step}` (not yet)"),
            ));
        }
        let hub = !value.starts_with(['/', '.', '~']) && value.matches('/').count() == 1;
        if server.model_is_dir && hub {
            return none(
                Check::warn(id, format!("{value} is not a local path: {} would download it from the Hugging Face hub at launch (its size is not checked)", server.name))
                    .fix("download it first (hf download REPO --local-dir DIR) and pass the directory"),
            );
        }
        return none(
            Check::fail(id, format!("{what} {value} does not exist ({})", names[0])).fix(format!(
                "pass the checkpoint's real path (`--set VAR=PATH` for the variable the profile takes it from: `{}` in the shipped recipes)",
                if what == "model" {
                    "model"
                } else {
                    "draft_model"
                }
            )),
        );
    }
    if server.model_is_dir {
        if !path.is_dir() {
            return none(
                Check::fail(
                    id,
                    format!(
                        "{what} {value} is not a directory: {} loads a checkpoint directory",
                        server.name
                    ),
                )
                .fix("pass the directory that holds config.json and the *.safetensors files"),
            );
        }
        if !path.join("config.json").is_file() {
            return none(
                Check::fail(
                    id,
                    format!("{what} {value} has no config.json: not a Hugging Face checkpoint"),
                )
                .fix("pass the directory that holds config.json and the *.safetensors files"),
            );
        }
    } else if !path.is_file() {
        return none(
            Check::fail(
                id,
                format!(
                    "{what} {value} is not a file: {} loads one model file (GGUF)",
                    server.name
                ),
            )
            .fix("pass the .gguf file itself"),
        );
    }
    Checkpoint {
        check: Check::pass(id, format!("{what} {value}")),
        path: Some(path),
    }
}

fn quantization(server: &Server, args: &Args, model: &Checkpoint, group: &[&Gpu]) -> Check {
    let id = "launch.quantization";
    let mut methods: Vec<(String, String)> = Vec::new();
    if let Some(q) = args.value(server.quantization) {
        methods.push((
            q.to_ascii_lowercase(),
            format!("{} {q}", server.quantization[0]),
        ));
    }
    if let Some((m, algo, format, from)) = model.path.as_deref().and_then(weights::quantization) {
        let name = table::normalize(&m, algo.as_deref(), format.as_deref());
        if !methods.iter().any(|(n, _)| *n == name) {
            methods.push((
                name,
                format!(
                    "the checkpoint's {from} ({m}{})",
                    algo.map(|a| format!(" {a}")).unwrap_or_default()
                ),
            ));
        }
    }
    if methods.is_empty() {
        return Check::skip(
            id,
            "no quantization given or found in the checkpoint's config.json",
        );
    }
    let Some(gpu) = group.iter().min_by_key(|g| g.cc()) else {
        return Check::skip(id, format!("{}: no GPU to compare with", methods[0].1));
    };
    let Some(cc) = gpu.cc() else {
        return Check::skip(
            id,
            format!(
                "{}: the capability of {} is unknown",
                methods[0].1, gpu.name
            ),
        );
    };
    let mut worst = Check::pass(
        id,
        format!(
            "{} runs on {} (cc {})",
            methods
                .iter()
                .map(|(_, w)| w.as_str())
                .collect::<Vec<_>>()
                .join(" and "),
            gpu.name,
            gpu.compute_cap
        ),
    );
    for (name, said) in &methods {
        for row in table::QUANT
            .iter()
            .filter(|r| r.methods.contains(&name.as_str()))
        {
            if cc >= row.min_cc || row.status <= worst.status {
                continue;
            }
            let (ma, mi) = row.min_cc;
            let summary = format!(
                "{said} needs cc ≥ {ma}.{mi}; {} is cc {}",
                gpu.name, gpu.compute_cap
            );
            let c = if row.status == Status::Fail {
                Check::fail(id, summary).fix(format!("serve on a GPU of cc ≥ {ma}.{mi}, or a checkpoint and profile without {name} (for this GPU: BF16, or FP8 on cc ≥ 8.9)"))
            } else {
                Check::warn(id, summary).fix(format!(
                    "expect slower kernels, or serve on a GPU of cc ≥ {ma}.{mi}"
                ))
            };
            worst = c.evidence(row.why);
        }
    }
    worst
}

fn fit(
    server: &Server,
    args: &Args,
    model: &Checkpoint,
    draft: &Checkpoint,
    group: &[&Gpu],
    h: &Host,
) -> Check {
    let id = "launch.weights";
    let Some(path) = &model.path else {
        return Check::skip(id, "no local model to measure");
    };
    let Some(size) = weights::size(path) else {
        return Check::skip(id, format!("no weight files found in {}", path.display()));
    };
    let extra = draft.path.as_deref().and_then(weights::size);
    let bytes = size.bytes + extra.as_ref().map_or(0, |d| d.bytes);
    let on_gpu = !server.tp.is_empty()
        || args.value(server.gpu_layers).is_some_and(|n| n != "0") && !group.is_empty();
    let (free, whose) = if on_gpu {
        if group.is_empty() {
            return Check::skip(
                id,
                format!("weights {}: no GPU to compare with", gib(bytes)),
            );
        }
        (
            group.iter().map(|g| free_bytes(g)).sum::<u64>(),
            format!("free on {} GPU(s) ({})", group.len(), describe(group)),
        )
    } else {
        match h.ram_available {
            Some(r) => (
                r,
                "of RAM available (the server runs on the CPU)".to_string(),
            ),
            None => {
                return Check::skip(id, format!("weights {}: available RAM unknown", gib(bytes)))
            }
        }
    };
    let what = match &extra {
        Some(d) => format!(
            "weights {} (model {} + draft {})",
            gib(bytes),
            gib(size.bytes),
            gib(d.bytes)
        ),
        None => format!("weights {}", gib(bytes)),
    };
    let margin = format!(
        "margin: refused above {:.0}% of free memory (CUDA context, NCCL buffers, activations), a warning above {:.0}% (too little left for the KV cache)",
        FIT_SHARE * 100.0,
        KV_SHARE * 100.0
    );
    let share = bytes as f64 / free.max(1) as f64;
    let c = if share > FIT_SHARE {
        Check::fail(id, format!("{what} cannot fit in {} {whose}", gib(free))).fix(
            "use more GPUs (a larger --tp-size), a quantized checkpoint, or GPUs with more memory",
        )
    } else if share > KV_SHARE {
        Check::warn(id, format!("{what} leave only {} of {} {whose} for the KV cache", gib(free.saturating_sub(bytes)), gib(free)))
            .fix("expect a short context and few concurrent requests; use more GPUs or a quantized checkpoint for more")
    } else {
        Check::pass(
            id,
            format!(
                "{what} fit in {} {whose} ({:.0}%)",
                gib(free),
                share * 100.0
            ),
        )
    };
    let mut c = c
        .evidence(format!("model size from {}", size.from))
        .evidence(margin);
    if let Some(d) = extra {
        c = c.evidence(format!("draft size from {}", d.from));
    }
    c
}

/// The flags the installed server knows: Ok((where from, flags)) or why they are unknown.
fn server_flags(l: &Launch, server: &Server) -> Result<(String, Vec<String>), String> {
    let program = l.cmd.first().map(PathBuf::from).unwrap_or_default();
    if server.tp.is_empty() {
        if !program.is_file() {
            return Err(match l.made_by(&program) {
                Some(step) => format!("{} is not built yet (step `{step}` builds it): its `--help` is read once it is", program.display()),
                None => format!("{} does not exist", program.display()),
            });
        }
        return flags::help_flags(&program).map(|f| (format!("`{} --help`", program.display()), f));
    }
    // SGLang: the server_args.py of the interpreter that runs it (`VENV/bin/python`).
    let venv = program.parent().and_then(Path::parent);
    let site = venv.and_then(|v| {
        std::fs::read_dir(v.join("lib"))
            .ok()?
            .flatten()
            .map(|e| e.path().join("site-packages"))
            .find(|s| s.join("sglang/srt/server_args.py").is_file())
    });
    if let Some(site) = site {
        let file = site.join("sglang/srt/server_args.py");
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let version =
            flags::sglang_version(&site).map_or(String::new(), |v| format!(" (sglang {v})"));
        return flags::sglang_flags(&text)
            .map(|f| (format!("{}{version}", file.display()), f))
            .ok_or_else(|| format!("{} has no add_argument calls kiln can read", file.display()));
    }
    let installed_by = l
        .made_by(&program)
        .map_or(String::new(), |s| format!(" (step `{s}` installs it)"));
    match l.pinned_sglang {
        Some(v) => match table::pinned_flags(server, v) {
            Some((from, f)) => Ok((format!("SGLang {v}, which the recipe pins and is not installed yet{installed_by}: {from}"), f)),
            None => Err(format!("SGLang is not installed yet{installed_by} and kiln has no flag list for the pinned {v}")),
        },
        None => Err(format!("no SGLang found beside {} and the recipe pins no version", program.display())),
    }
}

fn known_flags(l: &Launch, server: &Server, args: &Args) -> Check {
    let id = "launch.flags";
    let (from, known) = match server_flags(l, server) {
        Ok(k) => k,
        Err(why) => return Check::skip(id, format!("flags not checked: {why}")),
    };
    let mut unknown = Vec::new();
    let mut notes = Vec::new();
    for (flag, _) in &args.pairs {
        match flags::resolve(flag, &known, server.abbreviations) {
            Ok(None) => {}
            Ok(Some(full)) => notes.push(format!("{flag} is taken as {full} (an abbreviation)")),
            Err(c) if c.is_empty() => unknown.push(format!(
                "{flag}{}",
                crate::diagnostic::did_you_mean(flag, known.iter().map(String::as_str))
                    .map_or(String::new(), |s| format!(" (did you mean {s}?)"))
            )),
            Err(c) => unknown.push(format!("{flag} (ambiguous: {})", c.join(", "))),
        }
    }
    let c = if unknown.is_empty() {
        Check::pass(
            id,
            format!(
                "{} knows all {} flags of the profile",
                server.name,
                args.pairs.len()
            ),
        )
    } else {
        let crash = if server.abbreviations {
            "the launch would stop with argparse's \"unrecognized arguments\""
        } else {
            "the launch would stop with \"error: invalid argument\""
        };
        Check::fail(id, format!("{} does not know {}: {crash}", server.name, unknown.join(", ")))
            .fix("remove or rename the flag in the profile's args (the installed server's `--help` lists its flags)")
    };
    let mut c = c.evidence(format!("{} flags known from {from}", known.len()));
    for n in notes {
        c = c.evidence(n);
    }
    c
}

fn port(l: &Launch, h: &Host, args: Option<&Args>) -> Check {
    let id = "launch.port";
    let from_args = args.and_then(|a| {
        table::server_of(l.cmd)
            .and_then(|s| a.number(s.port))
            .and_then(|p| u16::try_from(p).ok())
    });
    let Some(port) = l.port.or(from_args) else {
        return Check::skip(id, "no port (the profile has no `port` and no --port)");
    };
    let busy = std::net::TcpStream::connect_timeout(
        &([127, 0, 0, 1], port).into(),
        std::time::Duration::from_millis(300),
    )
    .is_ok();
    if !busy {
        return Check::pass(id, format!("port {port} is free"));
    }
    match h.own_server {
        Some((profile, pid)) => Check::pass(
            id,
            format!("port {port} is held by the server kiln started for profile `{profile}` of {} (pid {pid})", l.recipe),
        )
        .evidence("kiln stops or reuses its own server before launching"),
        None => match crate::serve::port_holder(port) {
            Some((pid, argv)) => Check::fail(id, format!("port {port} is already in use by pid {pid} (`{}`), which kiln did not start for {}", argv.join(" "), l.recipe))
                .fix(format!("stop it (`kill {pid}`) if it is yours, or {}", another_port(l, port))),
            None => Check::fail(id, format!("port {port} is already in use by a process not visible to this user (not a server kiln started for {})", l.recipe))
                .fix(format!("end what holds it (`ss -ltnp 'sport = :{port}'` names it), or {}", another_port(l, port))),
        },
    }
}

/// How to move the server off `port`: `--set port=N` where the recipe has that variable, else
/// the profile's own setting.
fn another_port(l: &Launch, port: u16) -> String {
    if l.port_var {
        format!(
            "pick another port (e.g. `--set port={}`)",
            port.saturating_add(1)
        )
    } else {
        format!("give profile `{}` another `port` in the recipe", l.profile)
    }
}

/// The caches a first SGLang launch fills: FlashInfer's JIT workspace, Triton's and torch
/// inductor's caches.
fn jit_dirs(l: &Launch, h: &Host) -> Vec<(&'static str, PathBuf)> {
    let env = |k: &str| l.env.get(k).cloned().or_else(|| std::env::var(k).ok());
    let home = h
        .home
        .map_or_else(|| PathBuf::from("/root"), Path::to_path_buf);
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    vec![
        (
            "FlashInfer JIT",
            env("FLASHINFER_WORKSPACE_BASE")
                .map_or_else(|| home.clone(), PathBuf::from)
                .join(".cache/flashinfer"),
        ),
        (
            "Triton",
            env("TRITON_CACHE_DIR").map_or_else(|| home.join(".triton/cache"), PathBuf::from),
        ),
        (
            "torch inductor",
            env("TORCHINDUCTOR_CACHE_DIR").map_or_else(
                || std::env::temp_dir().join(format!("torchinductor_{user}")),
                PathBuf::from,
            ),
        ),
    ]
}

/// The check for `free` bytes where the `what` cache lives: a failure below [`JIT_FAIL`], a
/// warning below [`JIT_WARN`], else a pass.
fn jit_margin(free: u64, what: &str, dir: &Path) -> Check {
    let id = "launch.jit-disk";
    let line = format!(
        "{} free for the {what} cache ({})",
        gib(free),
        dir.display()
    );
    if free < JIT_FAIL {
        Check::fail(id, format!("only {line}: the first launch compiles kernels into it and fails when the disk fills"))
            .fix("free space there, or point FLASHINFER_WORKSPACE_BASE / TRITON_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR at a bigger disk (the profile's `env`)")
    } else if free < JIT_WARN {
        Check::warn(id, format!("only {line}"))
            .fix("free space there, or point FLASHINFER_WORKSPACE_BASE / TRITON_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR at a bigger disk")
    } else {
        Check::pass(id, line)
    }
}

fn jit_disk(l: &Launch, server: &Server, h: &Host) -> Check {
    let id = "launch.jit-disk";
    if !server.jit_caches {
        return Check::skip(id, format!("{} compiles no kernels at launch", server.name));
    }
    let mut worst: Option<(u64, &str, PathBuf)> = None;
    let mut evidence = Vec::new();
    for (what, dir) in jit_dirs(l, h) {
        let Some(free) = crate::host::system::free_disk_bytes(&dir) else {
            continue;
        };
        evidence.push(format!(
            "{what} cache {}: {} free",
            dir.display(),
            gib(free)
        ));
        if worst.as_ref().is_none_or(|(w, _, _)| free < *w) {
            worst = Some((free, what, dir));
        }
    }
    let Some((free, what, dir)) = worst else {
        return Check::skip(id, "no cache directory to measure");
    };
    let c = jit_margin(free, what, &dir);
    let mut c = c.evidence(format!(
        "kiln's margins: a failure below {}, a warning below {}",
        gib(JIT_FAIL),
        gib(JIT_WARN)
    ));
    for e in evidence {
        c = c.evidence(e);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jit_disk_margins_fail_below_one_gib_and_warn_below_five() {
        let dir = Path::new("/cache");
        for (free, status) in [
            (0, Status::Fail),
            (JIT_FAIL - 1, Status::Fail),
            (JIT_FAIL, Status::Warn),
            (JIT_WARN - 1, Status::Warn),
            (JIT_WARN, Status::Pass),
        ] {
            let c = jit_margin(free, "Triton", dir);
            assert_eq!(c.status, status, "{free} bytes: {}", c.summary);
        }
        let c = jit_margin(JIT_FAIL / 2, "Triton", dir);
        assert!(
            c.summary.starts_with("only 512.0 MiB free for the Triton cache (/cache): the first launch compiles kernels")
                && c.fix.as_deref().is_some_and(|f| f.contains("TRITON_CACHE_DIR")),
            "{c:?}"
        );
    }

    /// The two H200s of the real capture (tests/fixtures/gpu/h200x2/nvidia-smi-query.txt).
    pub(super) fn h200x2() -> Vec<Gpu> {
        let capture = include_str!("../../../tests/fixtures/gpu/h200x2/nvidia-smi-query.txt");
        let csv: String = capture
            .lines()
            .filter(|l| !l.starts_with('$') && !l.starts_with("[exit"))
            .flat_map(|l| [l, "\n"])
            .collect();
        crate::host::gpu::parse_csv(&csv)
    }

    fn gpus_check(tp: &str, cvd: Option<&str>) -> Check {
        let gpus = h200x2();
        assert_eq!(gpus.len(), 2);
        let cmd = ["python", "-m", "sglang.launch_server"].map(String::from);
        let args = ["--tp-size", tp].map(String::from);
        let env = BTreeMap::new();
        let l = Launch {
            recipe: "r",
            profile: "p",
            cmd: &cmd,
            args: &args,
            env: &env,
            port: None,
            unset: &[],
            made_by: &[],
            pinned_sglang: None,
            tp_var: true,
            port_var: true,
        };
        let h = Host {
            gpus: &gpus,
            cuda_visible: cvd,
            own_server: None,
            home: None,
            ram_available: None,
        };
        check(&l, &h)
            .into_iter()
            .find(|c| c.id == "launch.gpus")
            .unwrap()
    }

    #[test]
    fn tensor_parallel_one_gpu_too_few_fails() {
        assert_eq!(gpus_check("2", None).status, Status::Pass);
        assert_eq!(gpus_check("1", None).status, Status::Pass);
        let c = gpus_check("3", None);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.summary
                .starts_with("--tp-size 3 (tp 3) needs 3 GPUs; 2 visible"),
            "{}",
            c.summary
        );
        let c = gpus_check("2", Some("0"));
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.summary
                .starts_with("--tp-size 2 (tp 2) needs 2 GPUs; 1 visible (CUDA_VISIBLE_DEVICES=0)"),
            "{}",
            c.summary
        );
    }
}
