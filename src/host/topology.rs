//! GPU interconnect: `nvidia-smi topo -m` (NV#/PIX/PXB/PHB/NODE/SYS) and `topo -p2p rw` (peer access).

use serde::Serialize;

/// A square matrix of GPU-to-GPU cells as `nvidia-smi topo` prints it ("X" on the diagonal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Matrix {
    pub gpus: Vec<String>,
    pub cells: Vec<Vec<String>>,
}

impl Matrix {
    /// Every off-diagonal cell once (i < j).
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (usize, usize, &str)> {
        self.cells.iter().enumerate().flat_map(|(i, row)| {
            row.iter()
                .enumerate()
                .filter(move |(j, _)| i < *j)
                .map(move |(j, c)| (i, j, c.as_str()))
        })
    }

    /// True when no GPU pair is joined by NVLink (`NV#`).
    pub(crate) fn pcie_only(&self) -> bool {
        self.pairs().all(|(_, _, c)| !c.starts_with("NV"))
    }

    /// The distinct off-diagonal cells, sorted ("NODE", "SYS").
    pub(crate) fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self.pairs().map(|(_, _, c)| c.to_string()).collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

/// Strip terminal escapes (`topo` underlines its header).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parse the GPU part of a `topo -m` or `topo -p2p` matrix; NIC rows and columns are dropped.
pub(crate) fn parse_matrix(text: &str) -> Option<Matrix> {
    // Its colours stripped, any other control character escaped: cells reach the terminal.
    let lines: Vec<String> = text
        .lines()
        .map(|l| crate::columns::escape_controls(&strip_ansi(l)))
        .collect();
    let header_at = lines.iter().position(|l| {
        let mut words = l.split_whitespace();
        words.next() == Some("GPU0")
            && words
                .next()
                .is_some_and(|w| w.starts_with("GPU") || w.starts_with("NIC"))
    });
    // A single GPU prints a header of only "GPU0".
    let header_at = header_at.or_else(|| {
        lines
            .iter()
            .position(|l| l.split_whitespace().next() == Some("GPU0") && !l.contains(" X"))
    })?;
    let header: Vec<&str> = lines[header_at].split_whitespace().collect();
    let gpu_columns: Vec<usize> = header
        .iter()
        .enumerate()
        .filter(|(_, h)| is_gpu_label(h))
        .map(|(i, _)| i)
        .collect();
    let mut gpus = Vec::new();
    let mut cells = Vec::new();
    for line in &lines[header_at + 1..] {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(label) = words.first() else { break };
        if !is_gpu_label(label) {
            if label.starts_with("NIC") {
                continue;
            }
            break;
        }
        let row: Option<Vec<String>> = gpu_columns
            .iter()
            .map(|&c| words.get(c + 1).map(std::string::ToString::to_string))
            .collect();
        gpus.push(label.to_string());
        cells.push(row?);
    }
    (!gpus.is_empty()).then_some(Matrix { gpus, cells })
}

fn is_gpu_label(word: &str) -> bool {
    word.strip_prefix("GPU")
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_real_h200_nvlink_matrix() {
        let text = "\t\u{1b}[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\u{1b}[0m\nGPU0\t X \tNV18\t0-31\t0\t\tN/A\nGPU1\tNV18\t X \t0-31\t0\t\tN/A\n\nLegend:\n";
        let m = parse_matrix(text).unwrap();
        assert_eq!(m.gpus, ["GPU0", "GPU1"]);
        assert_eq!(m.cells[0], ["X", "NV18"]);
        assert!(!m.pcie_only());
        assert_eq!(m.kinds(), ["NV18"]);
    }

    #[test]
    fn drops_nic_columns_and_rows() {
        let text = "        GPU0    GPU1    NIC0    CPU Affinity   NUMA Affinity    GPU NUMA ID
GPU0     X      PIX     PIX     0-63,128-191   0        N/A
GPU1    PIX      X      NODE    0-63,128-191   0        N/A
NIC0    PIX     NODE     X
";
        let m = parse_matrix(text).unwrap();
        assert_eq!(m.cells, [["X", "PIX"], ["PIX", "X"]]);
        assert!(m.pcie_only());
    }

    #[test]
    fn parses_the_real_p2p_matrix() {
        let text = " \tGPU0\tGPU1\t\n GPU0\tX\tGNS\t\n GPU1\tGNS\tX\t\n\nLegend:\n";
        let m = parse_matrix(text).unwrap();
        assert_eq!(m.kinds(), ["GNS"]);
    }
}
