//! Profile arguments as flags: give a flag a value (replace it where the arguments carry it,
//! else append), and apply a profile's evidence-only arguments that way.

/// Whether `word` is a flag's value rather than the next flag (`-2` is a value).
fn is_value(word: &str) -> bool {
    !word.starts_with('-') || word.parse::<f64>().is_ok()
}

/// Give `flag` the value `value`: replace the value of its last occurrence (`-b 1024` or
/// `-b=1024`); a bare switch (the next word is another flag, as `verdict::flag_value` reads
/// it) gets the value after it; else append both.
pub fn set_flag(args: &mut Vec<String>, flag: &str, value: &str) {
    let prefix = format!("{flag}=");
    match args
        .iter()
        .rposition(|a| a == flag || a.starts_with(&prefix))
    {
        Some(i) if args[i] != flag => args[i] = format!("{flag}={value}"),
        Some(i) if args.get(i + 1).is_some_and(|n| is_value(n)) => args[i + 1] = value.to_string(),
        Some(i) => args.insert(i + 1, value.to_string()),
        None => {
            args.push(flag.to_string());
            args.push(value.to_string());
        }
    }
}

/// `evidence` as (flag, value) pairs: each flag with the word after it when that is a value
/// (`-lv 5`, `--flag=v`), `None` for a bare switch (`--metrics`). `Err(i)`: word `i` is a value
/// with no flag before it, or a flag's second value.
pub fn flag_pairs(evidence: &[String]) -> Result<Vec<(String, Option<String>)>, usize> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    let mut i = 0;
    while i < evidence.len() {
        let w = &evidence[i];
        if is_value(w) {
            return Err(i);
        }
        if let Some((flag, value)) = w.split_once('=') {
            out.push((flag.to_string(), Some(value.to_string())));
            i += 1;
        } else if evidence.get(i + 1).is_some_and(|n| is_value(n)) {
            out.push((w.clone(), Some(evidence[i + 1].clone())));
            i += 2;
        } else {
            out.push((w.clone(), None));
            i += 1;
        }
    }
    Ok(out)
}

/// `args` with `evidence` applied: each evidence flag with a value replaces that flag's value
/// where `args` carry it, else is appended; a bare switch is appended unless `args` carry it.
/// (Validation rejected evidence that is not flags and values.)
pub fn with_evidence(args: &[String], evidence: &[String]) -> Vec<String> {
    let mut out = args.to_vec();
    for (flag, value) in flag_pairs(evidence).unwrap_or_default() {
        match value {
            Some(v) => set_flag(&mut out, &flag, &v),
            None if out.iter().any(|a| a == &flag) => {}
            None => out.push(flag),
        }
    }
    out
}

/// The value of the last `flag` in `args` (`Some("")`: a bare switch), read as
/// `serve::verdict::flag_value` reads it.
fn value_of(args: &[String], flag: &str) -> Option<String> {
    let prefix = format!("{flag}=");
    let i = args
        .iter()
        .rposition(|a| a == flag || a.starts_with(&prefix))?;
    Some(match args[i].strip_prefix(&prefix) {
        Some(v) => v.to_string(),
        None => args
            .get(i + 1)
            .filter(|n| is_value(n))
            .cloned()
            .unwrap_or_default(),
    })
}

/// What a judged launch's arguments add to or change in `args`, as words (`-lv 5`), for the
/// report's "args difference".
pub fn evidence_difference(args: &[String], evidence: &[String]) -> Vec<String> {
    let judged = with_evidence(args, evidence);
    flag_pairs(evidence)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|(flag, value)| {
            let before = value_of(args, &flag);
            let after = value_of(&judged, &flag);
            let was = match before {
                Some(b) if b == after.clone().unwrap_or_default() => return Vec::new(),
                Some(b) if b.is_empty() => format!(" (was a bare {flag})"),
                Some(b) => format!(" (was {flag} {b})"),
                None => String::new(),
            };
            match value {
                Some(v) => vec![format!("{flag} {v}{was}")],
                None => vec![flag],
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_are_replaced_not_repeated() {
        let mut a = words("-b 1024 -ub=512 -t 2");
        set_flag(&mut a, "-b", "256");
        set_flag(&mut a, "-ub", "64");
        set_flag(&mut a, "-fa", "on");
        assert_eq!(a, words("-b 256 -ub=64 -t 2 -fa on"));
        let mut b = words("--flash-attn -t 2 --neg -1");
        set_flag(&mut b, "--flash-attn", "on");
        set_flag(&mut b, "--neg", "-2");
        assert_eq!(b, words("--flash-attn on -t 2 --neg -2"));
    }

    #[test]
    fn evidence_replaces_a_flag_the_args_carry_and_appends_the_rest() {
        let args = words("-m x.gguf --metrics -lv 4 -t 2");
        let judged = with_evidence(&args, &words("-lv 5 --metrics --log-timestamps"));
        assert_eq!(
            judged,
            words("-m x.gguf --metrics -lv 5 -t 2 --log-timestamps")
        );
        assert_eq!(
            evidence_difference(&args, &words("-lv 5 --metrics --log-timestamps")),
            ["-lv 5 (was -lv 4)", "--log-timestamps"]
        );
        assert_eq!(
            evidence_difference(&words("-t 2"), &words("-lv=5")),
            ["-lv 5"]
        );
        assert_eq!(flag_pairs(&words("5 -lv")), Err(0));
        assert_eq!(flag_pairs(&words("-lv 5 6")), Err(2));
    }
}
