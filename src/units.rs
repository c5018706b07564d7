//! Human units: durations (`90s`, `10m`, `1h30m`) and sizes (`9GiB`, `512MiB`) as recipes write
//! them, and sizes as kiln prints them (`1.5 GiB`).

use std::time::Duration;

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = 0u64;
    let mut num = String::new();
    for c in t.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            _ => return Err(format!("unknown duration unit `{c}`")),
        };
        let n: u64 = num.parse().map_err(|_| {
            format!(
                "`{c}` has no number before it: each unit (s, m, h, d) follows its own, as in \
                     `1h30m`, and a duration is whole seconds"
            )
        })?;
        total = n
            .checked_mul(unit)
            .and_then(|x| total.checked_add(x))
            .ok_or_else(|| "that duration is too long".to_string())?;
        num.clear();
    }
    if !num.is_empty() || total == 0 {
        return Err("expected a duration such as `90s`, `10m` or `1h30m`".into());
    }
    Ok(Duration::from_secs(total))
}

pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| "expected a size such as `9GiB` or `512MiB`".to_string())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        "T" | "TB" | "TiB" => 1 << 40,
        u => {
            return Err(format!(
                "unknown size unit `{u}` (use KiB, MiB, GiB or TiB)"
            ))
        }
    };
    Ok((n * mult as f64) as u64)
}

pub(crate) fn format_size(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    let b = bytes as f64;
    if b >= GIB {
        format!("{:.1} GiB", b / GIB)
    } else {
        format!("{:.1} MiB", b / MIB)
    }
}

/// `1.5 GiB`, `12.0 MiB`, `512 B`.
pub(crate) fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} {}", UNITS[0])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("99999999999999999d").is_err());
        // Milliseconds read as a minute then an `s` without its number: said so.
        let ms = parse_duration("1ms").unwrap_err();
        assert!(
            ms.starts_with("`s` has no number before it") && ms.ends_with("whole seconds"),
            "{ms}"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("9GiB").unwrap(), 9 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("9 parsecs").is_err());
    }
}
